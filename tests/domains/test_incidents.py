"""A tray marked down opens one incident that knows the domains and tenants it hit, and
ends when the tray is marked up; an operator's note on it reaches every affected domain's
timeline and notifications, and nobody else."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.incidents import incident_note
from domains.computedomains.models import Incident
from domains.computedomains.trays import tray_act
from domains.errors import InvalidInput
from domains.notifications.dispatch import notify_event
from domains.notifications.services import subscription_create
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


@pytest.fixture
def down(topology, ns_a, tenant_a, operator, django_capture_on_commit_callbacks):
    """team-a/train on two trays; an operator drains its first tray and marks it down."""
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    tray = domain.members.filter(active=True).order_by("index").first().node
    actor = Actor.for_user(operator)
    with django_capture_on_commit_callbacks(execute=True):
        tray_act(actor=actor, node=tray, action="drain", reason="fans")
        tray_act(actor=actor, node=tray, action="mark_down", reason="PSU fault")
    return domain, tray


def test_marking_a_tray_down_opens_an_incident_naming_the_domains_it_hit(down, operator):
    domain, tray = down
    incident = Incident.objects.get()
    assert incident.node == tray and incident.is_open
    assert incident.reason == "PSU fault" and incident.opened_by == operator.username
    assert list(incident.domains.all()) == [domain]
    opened = Event.objects.get(verb="incident.opened")
    assert opened.details["incident"] == incident.pk


def test_marking_it_up_ends_the_incident_and_another_mark_down_opens_a_new_one(
    down, operator, django_capture_on_commit_callbacks
):
    domain, tray = down
    actor = Actor.for_user(operator)
    with django_capture_on_commit_callbacks(execute=True):
        tray_act(actor=actor, node=tray, action="mark_up")
    first = Incident.objects.get()
    assert first.ended_at is not None
    assert Event.objects.get(verb="incident.closed").details["incident"] == first.pk
    with django_capture_on_commit_callbacks(execute=True):
        tray_act(actor=actor, node=tray, action="drain")
        tray_act(actor=actor, node=tray, action="mark_down", reason="again")
    second = Incident.objects.get(ended_at=None)
    assert second.pk != first.pk and second.reason == "again"
    assert list(second.domains.all()) == [domain]  # the Degraded domain still holds it


def test_a_note_reaches_each_hit_domains_timeline_and_its_tenants_notifications(
    down, operator, tenant_a, tenant_b
):
    domain, _ = down
    mine = subscription_create(user=tenant_a, channel="in_app", kinds=["domain.degraded"])
    theirs = subscription_create(user=tenant_b, channel="in_app", kinds=["domain.degraded"])
    incident = Incident.objects.get()
    reached = incident_note(
        actor=Actor.for_user(operator), incident=incident, note="Replacing the PSU by 14:00."
    )
    assert reached == 1
    line = Event.objects.get(verb="domain.incident_note")
    assert line.domain == domain and line.namespace == domain.namespace
    assert line.message.endswith("Replacing the PSU by 14:00.")
    notify_event(event_id=line.pk)
    told = mine.notifications.get()
    assert told.title == "Operators' note on team-a/train: a tray of it is down"
    assert "Replacing the PSU by 14:00." in told.body
    assert not theirs.notifications.exists()


@pytest.mark.parametrize(("note", "words"), [("  ", "write the note"), ("x" * 501, "at most 500")])
def test_an_empty_or_overlong_note_is_refused_naming_the_field(down, operator, note, words):
    incident = Incident.objects.get()
    with pytest.raises(InvalidInput, match=words) as refused:
        incident_note(actor=Actor.for_user(operator), incident=incident, note=note)
    assert refused.value.field == "note"
    assert not Event.objects.filter(verb__endswith="note").exists()


def test_the_incident_pages_are_for_operators_only(client, down, tenant_a, operator):
    incident = Incident.objects.get()
    urls = [reverse("operator:incidents"), reverse("operator:incident", args=[incident.pk])]
    for url in urls:
        assert client.get(url).status_code == 302  # to the login page
    client.force_login(tenant_a)
    for url in urls:
        assert client.get(url).status_code == 403
        assert client.post(url, {"note": "hello"}).status_code == 403
    assert not Event.objects.filter(verb="incident.note").exists()
    client.force_login(operator)
    page = client.get(urls[1]).content.decode()
    assert "team-a" in page and "train" in page
    assert "Tenants read this." in page


def test_the_tenant_reads_the_note_on_her_domain_page_and_another_tenant_cannot(
    client, down, operator, tenant_a, tenant_b
):
    domain, _ = down
    client.force_login(operator)
    url = reverse("operator:incident", args=[Incident.objects.get().pk])
    assert client.post(url, {"note": "New PSU at 14:00."}).status_code == 302
    page = reverse("tenant:domain", args=["team-a", domain.uid])
    client.force_login(tenant_a)
    body = client.get(page).content.decode()
    assert 'id="incident-notes"' in body and "New PSU at 14:00." in body
    client.force_login(tenant_b)
    assert client.get(page).status_code == 404


def test_the_incident_list_costs_the_same_queries_for_one_incident_or_many(
    client, down, operator, ns_a, tenant_a, django_capture_on_commit_callbacks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(operator)
    url = reverse("operator:incidents")

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    one = queries()
    actor = Actor.for_user(operator)
    for name in ("b", "c"):
        domain = form(request_domain(ns_a, tenant_a, name, num_nodes=1))
        tray = domain.members.get().node
        with django_capture_on_commit_callbacks(execute=True):
            tray_act(actor=actor, node=tray, action="drain")
            tray_act(actor=actor, node=tray, action="mark_down")
    assert Incident.objects.count() == 3
    assert queries() == one
