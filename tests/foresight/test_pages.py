"""Blast radius on the operator's pages: a tray, its drain preview, a rack, a clique, a
switch tray and a power shelf (whose state operators record there)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from domains.audit.models import Event
from domains.inventory.models import PowerShelf
from testbed import factories
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


@pytest.fixture
def domains(topology, ns_a, tenant_a, ns_b, tenant_b):
    return (
        form(request_domain(ns_a, tenant_a, "train", num_nodes=2)),
        form(request_domain(ns_b, tenant_b, "infer", num_nodes=3)),
    )


def first_host(domain) -> str:
    return domain.members.order_by("index").first().node.hostname


def test_the_tray_page_and_its_drain_preview_name_the_domain_and_tenant(client, operator, domains):
    client.force_login(operator)
    host = first_host(domains[0])
    for url in (reverse("operator:node", args=[host]),
                reverse("operator:node_action", args=[host, "drain"])):  # fmt: skip
        page = client.get(url).content.decode()
        assert 'data-blast-hit="down"' in page
        assert 'data-domain="train"' in page and "loses 1 of 2 trays (4 GPUs)" in page
        assert 'class="blast-tenants">team-a<' in page
        assert 'data-domain="infer"' not in page


def test_the_rack_page_shows_the_whole_rack_and_links_every_part(client, operator, domains):
    client.force_login(operator)
    page = client.get(reverse("operator:rack", args=["gb-r01"])).content.decode()
    assert 'class="blast-tenants">team-a, team-b<' in page
    # Each part is drawn in the rack's elevation and listed in its table.
    assert page.count('<tr data-part="gb-r01-s') == 9 and page.count('data-part="gb-r01-s') == 18
    assert page.count('<tr data-part="gb-r01-p') == 8 and page.count('data-part="gb-r01-p') == 16
    assert reverse("operator:impact", args=["power_shelf", "gb-r01-p1"]) in page


def test_the_rack_page_costs_the_same_queries_with_more_domains(
    client, operator, topology, ns_a, tenant_a
):
    client.force_login(operator)
    url = reverse("operator:rack", args=["gb-r01"])

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    before = queries()
    for i in range(3):
        form(request_domain(ns_a, tenant_a, f"more-{i}", num_nodes=2))
    assert queries() == before


def test_a_clique_and_a_switch_tray_have_their_impact_page(client, operator, domains):
    client.force_login(operator)
    label = domains[0].members.first().clique.label
    clique = client.get(reverse("operator:impact", args=["clique", label])).content.decode()
    assert 'data-blast-hit="down"' in clique and 'data-domain="infer"' in clique
    switch = client.get(reverse("operator:impact", args=["switch_tray", "gb-r01-s02"]))
    body = switch.content.decode()
    assert 'data-blast-hit="bandwidth"' in body and 'data-hit="bandwidth"' in body
    assert "loses 11% of its NVLink bandwidth" in body
    missing = client.get(reverse("operator:impact", args=["switch_tray", "gb-r09-s01"]))
    assert missing.status_code == 404


def test_an_operator_records_a_power_shelf_down_with_a_reason(client, operator, domains):
    client.force_login(operator)
    url = reverse("operator:impact", args=["power_shelf", "gb-r01-p2"])
    page = client.get(url).content.decode()
    assert 'data-blast-hit="redundancy"' in page and "No live domain is hit." in page
    response = client.post(url, {"state": "down", "reason": "PSU 3 fan"})
    assert response.status_code == 302
    shelf = PowerShelf.objects.get(name="gb-r01-p2")
    assert (shelf.state, shelf.state_reason) == ("down", "PSU 3 fan")
    event = Event.objects.get(verb="power_shelf.down")
    assert event.actor_name == "operator" and event.message == "PSU 3 fan"
    bad = client.post(url, {"state": "melted"})
    assert bad.status_code == 200 and PowerShelf.objects.get(name="gb-r01-p2").state == "down"


@pytest.mark.parametrize("who", ["anonymous", "tenant"])
def test_only_operators_open_impact_pages(client, domains, tenant_a, who):
    if who == "tenant":
        client.force_login(tenant_a)
    url = reverse("operator:impact", args=["rack", "gb-r01"])
    response = client.get(url)
    assert response.status_code == (302 if who == "anonymous" else 403)
    post = client.post(reverse("operator:impact", args=["power_shelf", "gb-r01-p1"]),
                       {"state": "down"})  # fmt: skip
    assert post.status_code in (302, 403)
    assert not PowerShelf.objects.filter(state="down").exists()


def test_a_rack_without_parts_says_so(client, operator, db):
    factories.make_racks("18")
    PowerShelf.objects.all().delete()
    client.force_login(operator)
    page = client.get(reverse("operator:rack", args=["gb-r01"])).content.decode()
    assert page.count('data-part="gb-r01-p') == 0 and page.count('<tr data-part="gb-r01-s') == 9
    assert "not inventoried" in page  # the shelves drawn from the rack's layout, dashed


def test_an_operator_schedules_maintenance_and_the_tenant_sees_it_ahead(
    client, operator, tenant_a, domains
):
    client.force_login(operator)
    url = reverse("operator:maintenance")
    bad = client.post(url, {"scope": "rack", "target": "gb-r09", "starts_at": "2099-01-01T10:00",
                            "ends_at": "2099-01-01T12:00", "reason": "busbar"})  # fmt: skip
    assert bad.status_code == 200 and "no rack named" in bad.content.decode()
    soon = timezone.now() + timedelta(hours=2)
    response = client.post(url, {"scope": "rack", "target": "gb-r01", "starts_at":
                                 f"{soon:%Y-%m-%dT%H:%M}", "ends_at": "2099-01-01T12:00",
                                 "reason": "busbar torque check"})  # fmt: skip
    assert response.status_code == 302
    page = client.get(url).content.decode()
    assert 'data-domain="train"' in page and 'data-domain="infer"' in page
    client.force_login(tenant_a)
    assert client.get(url).status_code == 403
    domain_page = client.get(
        reverse("tenant:domain", args=["team-a", domains[0].uid])
    ).content.decode()
    assert 'id="domain-maintenance"' in domain_page and "busbar torque check" in domain_page


def test_the_request_preview_says_which_maintenance_it_avoids(client, operator, tenant_a, domains):
    client.force_login(operator)
    client.post(reverse("operator:maintenance"), {"scope": "trays", "target":
                "gb-r01-t17, gb-r01-t18", "starts_at": "2000-01-01T10:00",
                "ends_at": "2099-01-01T12:00", "reason": "GPU swap"})  # fmt: skip
    client.force_login(tenant_a)
    preview = client.post(
        reverse("tenant:preview", args=["team-a"]),
        {"name": "next", "num_nodes": 2, "allocation_mode": "Single",
         "placement_constraint": "any"},
    ).content.decode()  # fmt: skip
    assert 'class="maintenance-notes"' in preview and "GPU swap" in preview
    assert "gb-r01-t17" in preview
