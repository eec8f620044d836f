"""The fleet view, clique pages and bulk tray actions: what they show, what they do, and
query counts that do not grow with the fleet."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain
from domains.foresight.maintenance import maintenance_schedule
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon, node_drain, node_mark_down
from testbed import factories
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize(
    "query", ["", "?state=free", "?tenant=team-a", "?q=t0&page=2", "?domain=team-a/one"]
)
def test_the_fleet_costs_the_same_queries_for_two_racks_and_forty(
    client, operator, tenant_a, ns_a, query
):
    factories.make_racks("18", "9,9", ip_prefix="127.13")
    form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    client.force_login(operator)
    url = reverse("operator:fabric") + query
    small = _queries(client, url)
    factories.make_racks(*(["18", "9,9"] * 19), ip_prefix="127.14", first_rack=3)
    form(request_domain(ns_a, tenant_a, "two", num_nodes=3))
    node_cordon(actor=Actor.for_user(operator), node=Node.objects.get(hostname="gb-r07-t01"))
    # Maintenance on the drawn racks and a day of history cost no query more either.
    maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=timezone.now() + timedelta(hours=1),
        ends_at=timezone.now() + timedelta(hours=3),
        reason="firmware",
        rack="gb-r01",
    )
    ComputeDomain.objects.update(ready_at=timezone.now() - timedelta(hours=2))
    assert _queries(client, url) == small


def test_the_band_counts_gpus_and_trays_by_what_they_do(client, operator, tenant_a, ns_a):
    (rack,) = factories.make_racks("18", ip_prefix="127.13")
    form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    actor = Actor.for_user(operator)
    node_cordon(actor=actor, node=rack.nodes.get(slot=10))
    node_drain(actor=actor, node=rack.nodes.get(slot=11))
    node_mark_down(actor=actor, node=rack.nodes.get(slot=12))
    client.force_login(operator)
    page = client.get(reverse("operator:fabric")).content.decode()

    def band(key: str) -> str:
        cell = page.split(f'data-band="{key}">', 1)[1].split("</", 1)[0]
        return re.sub(r"<[^>]+>", "", cell)

    assert band("trays-total") == "18" and band("gpus-total") == "72"
    assert band("trays-used") == "2" and band("gpus-used") == "8"
    assert band("trays-free") == "13" and band("gpus-free") == "52"
    assert band("trays-cordoned") == "1" and band("trays-draining") == "1"
    assert band("trays-down") == "1" and band("gpus-draining") == "4"
    assert band("racks") == "1"
    # One rack fits one page of elevations: no heat-map of every rack above it.
    assert page.count('<a class="hm"') == 0 and page.count('<svg class="el"') == 1


COLUMNS = ("free", "used", "cordoned", "draining", "down", "not-ready")


def _band(page: str, key: str) -> int:
    found = re.search(rf'data-band="{key}">(.*?)</[td]d>', page, re.S)
    assert found, key
    return int(re.sub(r"<[^>]+>", "", found.group(1)))


def test_the_band_adds_up_when_trays_in_use_are_flagged_or_their_agent_silent(
    client, operator, tenant_a, ns_a
):
    """Each tray counts once: a tray in use that is cordoned, marked down or whose agent went
    silent is in its flag's column (or "not ready"), and "of which held by a domain" says a
    domain still holds it. The columns add up to the total, trays and GPUs alike."""
    factories.make_racks("18", ip_prefix="127.13")
    domain = form(request_domain(ns_a, tenant_a, "busy", num_nodes=4))
    held = [m.node for m in domain.members.select_related("node").order_by("index")]
    actor = Actor.for_user(operator)
    node_cordon(actor=actor, node=held[0])
    node_drain(actor=actor, node=held[1])
    node_mark_down(actor=actor, node=held[1])
    factories.stale_heartbeat(held[2], timedelta(seconds=75))  # its agent was killed
    client.force_login(operator)
    page = client.get(reverse("operator:fabric")).content.decode()
    for what in ("trays", "gpus", "held"):
        parts = sum(_band(page, f"{what}-{c}") for c in COLUMNS)
        assert parts == _band(page, f"{what}-total"), what
    assert _band(page, "trays-total") == 18 and _band(page, "gpus-total") == 72
    assert _band(page, "trays-used") == 1 and _band(page, "trays-cordoned") == 1
    assert _band(page, "trays-down") == 1 and _band(page, "trays-not-ready") == 1
    assert _band(page, "held-total") == 4 and _band(page, "held-not-ready") == 1
    assert _band(page, "not-ready") == 1  # the look-at-this line
    # ?state=not_ready lists the tray whose agent went silent, in use as it is.
    listed = client.get(reverse("operator:fabric") + "?state=not_ready").content.decode()
    assert f'data-hostname="{held[2].hostname}"' in listed.split('id="fleet-matches"')[1]


def test_filters_narrow_the_racks_and_a_hostname_found_once_opens_its_tray(
    client, operator, tenant_a, ns_a
):
    racks = factories.make_racks("18", "9,9", "18", ip_prefix="127.13")
    form(
        request_domain(
            ns_a, tenant_a, "one", placement_constraint="rack", placement_target=racks[2].name
        )
    )
    client.force_login(operator)
    url = reverse("operator:fabric")
    by_tenant = client.get(url, {"tenant": "team-a"}).content.decode()
    assert by_tenant.count('<a class="hm"') == 1 and f'data-rack="{racks[2].name}"' in by_tenant
    assert "2 matching trays in 1 rack" in by_tenant
    clique = racks[1].cliques.order_by("clique_id").first()
    by_clique = client.get(url, {"clique": clique.label}).content.decode()
    assert "9 matching trays in 1 rack" in by_clique
    assert reverse("operator:clique", args=[clique.label]) in by_clique
    found = client.get(url, {"q": "gb-r02-t05"})
    assert found.status_code == 302 and found.url == reverse("operator:node", args=["gb-r02-t05"])
    several = client.get(url, {"q": "-t05"}).content.decode()
    assert "3 matching trays in 3 racks" in several


def test_the_clique_page_shows_its_trays_and_who_a_drain_would_touch(
    client, operator, tenant_a, ns_a
):
    factories.make_racks("9,9", ip_prefix="127.13")
    domain = form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    clique = domain.members.first().clique
    client.force_login(operator)
    page = client.get(reverse("operator:clique", args=[clique.label])).content.decode()
    assert page.count('<input type="checkbox" name="tray"') == 9
    assert 'data-domain="one"' in page and "team-a" in page
    assert client.get(reverse("operator:clique", args=["nope.9"])).status_code == 404


def test_a_bulk_drain_previews_its_impact_then_drains_only_what_it_changes(
    client, operator, tenant_a, ns_a
):
    (rack,) = factories.make_racks("18", ip_prefix="127.13")
    domain = form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    held = [m.node.hostname for m in domain.members.select_related("node")]
    other = rack.nodes.exclude(hostname__in=held).order_by("slot").first()
    node_drain(actor=Actor.for_user(operator), node=other)
    client.force_login(operator)
    url = reverse("operator:bulk_action")
    trays = [*held, other.hostname]
    preview = client.post(url, {"action": "drain", "tray": trays}).content.decode()
    assert 'id="bulk-changes">2<' in preview
    assert "is draining already" in preview
    assert 'data-domain="one"' in preview and "team-a" in preview
    assert Node.objects.filter(state=NodeState.DRAINING).count() == 1  # nothing done yet

    done = client.post(
        url, {"action": "drain", "tray": trays, "confirm": "1", "reason": "rack move"}
    )
    assert done.status_code == 302
    assert Node.objects.filter(state=NodeState.DRAINING).count() == 3
    assert Event.objects.filter(verb="node.draining", message="rack move").count() == 2


def test_bulk_actions_are_for_operators_and_never_mark_down(client, operator, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix="127.13")
    url = reverse("operator:bulk_action")
    client.force_login(tenant_a)
    assert client.post(url, {"action": "cordon", "tray": ["gb-r01-t01"]}).status_code == 403
    client.force_login(operator)
    refused = client.post(
        url, {"action": "mark_down", "tray": ["gb-r01-t01"], "confirm": "1"}, follow=True
    )
    assert "Pick cordon, drain or uncordon" in refused.content.decode()
    assert Node.objects.get(hostname="gb-r01-t01").state == NodeState.READY
    outside = client.post(url, {"action": "cordon", "tray": ["gb-r01-t01"],
                                "confirm": "1", "next": "https://evil.example/"})  # fmt: skip
    assert outside.url == reverse("operator:fabric")


def test_the_trends_have_axes_and_a_range_to_choose(client, operator):
    factories.make_racks("18", ip_prefix="127.13")
    client.force_login(operator)
    page = client.get(reverse("operator:fabric") + "?range=7d").content.decode()
    assert "Last 7 d" in page
    assert 'aria-current="true" data-range="7d"' in page
    chart = page.split('data-trend="formation-p95"', 1)[1].split("</svg>", 1)[0]
    assert 'class="sp-axes"' in chart and ">now</text>" in chart and ">7 d ago</text>" in chart
    assert 'aria-label="Formation p95 (placed → Ready) over the last 7 d' in chart
    assert 'data-trend="approval-p95"' in page
    default = client.get(reverse("operator:fabric") + "?range=nonsense").content.decode()
    assert "Last 24 h" in default
