"""Details of the pages that a walk through every role found wrong: each test would have
caught its own."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from domains.audit.events import Actor
from domains.inventory.models import Node
from domains.inventory.services import node_mark_down
from domains.tenancy.services import quota_set
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def test_the_headroom_line_comes_again_with_every_preview(client, admin, tenant_a, ns_a, topology):
    client.force_login(tenant_a)
    url = reverse("tenant:preview", args=["team-a"])
    fields = {"name": "x", "size": "trays", "num_nodes": 2, "allocation_mode": "Single",
              "placement_constraint": "any"}  # fmt: skip
    before = client.post(url, fields).content.decode()
    assert 'id="headroom" hx-swap-oob="true"' in before
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, max_nodes=6)
    after = client.post(url, fields).content.decode()
    line = after.split('id="headroom" hx-swap-oob="true">', 1)[1].split("</p>", 1)[0]
    assert 'up to <strong id="headroom-trays">6 trays</strong>' in line


def test_a_down_trays_marker_is_cut_with_its_word_inside_the_box(
    client, operator, tenant_a, ns_a, topology
):
    domain = form(request_domain(ns_a, tenant_a, "llm-pretrain-xl", num_nodes=2))
    dead = domain.members.order_by("index").first().node
    node_mark_down(actor=Actor.for_user(operator), node=dead, reason="PSU")
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", domain.uid])).content.decode()
    words = re.findall(r'class="word">([^<]*)</text>', page)
    assert "▶ down · llm-pretrai…" in words
    assert all(len(w) <= 21 for w in words), words  # what fits in a tenant's tray box


def test_a_quota_saved_below_use_highlights_its_row(client, admin, tenant_a, ns_a, ready_domain):
    client.force_login(admin)
    url = reverse("admin_ui:quota_edit", args=["team-a"])
    saved = client.post(url, {"max_gpus": 4, "max_nodes": 12, "max_domains": 4})
    assert saved["Location"].endswith("#quota-team-a")
    page = client.get(reverse("admin_ui:quotas")).content.decode()
    row = page.split('id="quota-team-a"', 1)[1].split("</tr>", 1)[0]
    assert 'class="over-quota" data-over="gpus"' in row and "over quota" in row
    assert row.count('class="over"') == 1


def test_an_audit_filter_whose_since_is_after_its_until_names_the_mistake(client, admin):
    client.force_login(admin)
    page = client.get(
        reverse("admin_ui:audit"), {"since": "2026-11-28T10:00", "until": "2026-11-27T10:00"}
    ).content.decode()
    assert 'id="audit-invalid"' in page and "No events match" not in page
    assert "Until (2026-11-27 10:00) is before since (2026-11-28 10:00)" in page


def test_zero_trays_is_shown_again_as_follow_the_workload(client, tenant_a, ns_a, topology):
    client.force_login(tenant_a)
    url = reverse("tenant:request", args=["team-a"])
    # The name is wrong, so the form comes back: its size radio must say what 0 meant.
    fields = {"name": "-bad-", "size": "trays", "num_nodes": 0, "allocation_mode": "Single",
              "placement_constraint": "any"}  # fmt: skip
    page = client.post(url, fields).content.decode()
    checked = re.search(r'<input[^>]*name="size"[^>]*value="workload"[^>]*>', page).group(0)
    assert "checked" in checked


def test_a_down_trays_blast_radius_says_it_is_down_and_counts_in_plain_words(
    client, operator, tenant_a, ns_a, topology
):
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    tray = domain.members.order_by("index").first().node
    client.force_login(operator)
    page = client.get(reverse("operator:node", args=[tray.hostname])).content.decode()
    assert "1 tray stops; 1 live domain, in 1 namespace, loses trays and turns Degraded" in page
    node_mark_down(actor=Actor.for_user(operator), node=Node.objects.get(pk=tray.pk), reason="x")
    down = client.get(reverse("operator:node", args=[tray.hostname])).content.decode()
    assert "If it went down" not in down and "It is down: who lost it" in down
