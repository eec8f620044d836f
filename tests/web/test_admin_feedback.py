"""Admin pages say when what they were given cannot be used as asked: an audit filter that
cannot be read lists nothing (and says so), an empty list says why, a quota saved below
current use warns."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.audit.models import Event
from domains.tenancy.models import Quota

pytestmark = pytest.mark.django_db


def test_an_audit_filter_with_an_unreadable_date_lists_nothing_and_says_which_field(
    client, admin, tenant_a, ready_domain
):
    client.force_login(admin)
    url = reverse("admin_ui:audit")
    body = client.get(url, {"since": "yesterday-ish"}).content.decode()
    assert 'id="id_since-errors"' in body and "Enter a valid date/time." in body
    assert 'id="audit-invalid"' in body and "domain.requested" not in body
    csv = client.get(url, {"since": "yesterday-ish", "format": "csv"})
    assert csv.status_code == 400 and "since: Enter a valid date/time." in csv.content.decode()


def test_an_empty_audit_page_says_why_and_blames_filters_only_when_there_are_some(
    client, admin, tenant_a, ready_domain
):
    client.force_login(admin)
    url = reverse("admin_ui:audit")
    unfiltered = client.get(url, {"page": 999}).content.decode()
    assert "No events on page 999: the log is shorter." in unfiltered
    assert "match these filters" not in unfiltered
    filtered = client.get(url, {"actor": "nobody-at-all"}).content.decode()
    assert "No events match these filters." in filtered
    Event.objects.all().delete()
    assert "No events recorded yet." in client.get(url).content.decode()


def test_a_quota_saved_below_what_the_namespace_holds_warns_and_still_saves(
    client, admin, tenant_a, ns_a, ready_domain
):
    client.force_login(admin)
    url = reverse("admin_ui:quota_edit", args=["team-a"])
    resp = client.post(url, {"max_gpus": 4, "max_nodes": 12, "max_domains": 4}, follow=True)
    assert Quota.objects.get(namespace=ns_a).max_gpus == 4
    body = resp.content.decode()
    assert 'class="msg-warning"' in body
    assert "team-a holds more than its new quota (GPUs: 4 is below the 8 held now)" in body
    quiet = client.post(url, {"max_gpus": 48, "max_nodes": 12, "max_domains": 4}, follow=True)
    assert 'class="msg-warning"' not in quiet.content.decode()
