"""The operators' versions page and maintenance calendar, the tray page's GPU health, what
a tenant is told of their own trays' GPUs, and the warning before a domain would land
across trays with different drivers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from domains.agents.gpuhealth import gpu_health_record
from domains.audit.events import Actor
from domains.computedomains.services import domain_dry_run
from domains.computedomains.specs import DomainSpec
from domains.foresight.maintenance import maintenance_schedule
from domains.inventory.models import Gpu, Node
from testbed import factories
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def sample(gpu: Gpu, **values: object) -> dict:
    return {
        "index": gpu.index, "uuid": gpu.uuid, "temperature_c": 47, "power_mw": 615_000,
        "xid_count": 0, "last_xid": 0, "nvlink_crc_flit_errors": 0, "nvlink_crc_data_errors": 0,
        "nvlink_replay_errors": 0, "nvlink_recovery_errors": 0, "ecc_corrected": 0,
        "ecc_uncorrected": 0,
    } | values  # fmt: skip


def make_sick(node: Node, index: int = 1) -> None:
    gpus = list(node.gpus.order_by("index"))
    gpu_health_record(node_id=node.pk, samples=[sample(g) for g in gpus])  # type: ignore[misc]
    sick = [sample(g, xid_count=1, last_xid=79) if g.index == index else sample(g) for g in gpus]
    gpu_health_record(node_id=node.pk, samples=sick)  # type: ignore[arg-type]


# --- versions ----------------------------------------------------------------------------------
def test_versions_highlight_a_tray_off_the_usual_driver_and_its_mixed_clique(
    client, operator, topology
):
    Node.objects.update(driver_version="580.82.07", imex_version="580.82.07", agent_version="0.1.0")
    Gpu.objects.update(vbios_version="97.00.B9.00.12")
    odd = Node.objects.order_by("slot")[3]
    Node.objects.filter(pk=odd.pk).update(driver_version="575.57.08")
    client.force_login(operator)
    page = client.get(reverse("operator:versions")).content.decode()
    row = page.split(f'data-tray="{odd.hostname}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-drift="driver"' in page.split(f'data-tray="{odd.hostname}"', 1)[0][-80:] + row
    assert 'class="drift" title="the fleet\'s usual: 580.82.07"><code>575.57.08' in row
    assert 'id="mixed-cliques"' in page and "<code>575.57.08</code> on 1" in page
    only = client.get(reverse("operator:versions"), {"drift": "1"}).content.decode()
    assert only.count("<tr data-tray=") == 1


def test_the_versions_page_costs_the_same_queries_for_one_rack_and_three(client, operator):
    factories.make_racks("18", ip_prefix=factories.tray_ip_prefix(15))
    client.force_login(operator)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("operator:versions"))
    factories.make_racks("18", "18", ip_prefix=factories.tray_ip_prefix(16), first_rack=2)
    with CaptureQueriesContext(connection) as many:
        client.get(reverse("operator:versions"))
    assert len(many) == len(few)


def test_a_preview_across_trays_with_different_drivers_warns(client, tenant_a, ns_a, topology):
    Node.objects.update(driver_version="580.82.07")
    last = Node.objects.order_by("slot").last()
    Node.objects.filter(pk=last.pk).update(driver_version="575.57.08")
    result = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="mixed", num_nodes=18))
    assert result.mixed_drivers == ["580.82.07 on 17 trays", "575.57.08 on 1 tray"]
    client.force_login(tenant_a)
    url = reverse("tenant:preview", args=["team-a"])
    fields = {"name": "mixed", "num_nodes": 18, "size": "trays", "allocation_mode": "Single",
              "placement_constraint": "any"}  # fmt: skip
    body = client.post(url, fields).content.decode()
    assert 'id="mixed-drivers"' in body and "575.57.08 on 1 tray" in body
    same = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="same", num_nodes=2))
    assert same.mixed_drivers == []


def test_the_api_dry_run_names_mixed_drivers(tenant_a, ns_a, topology):
    from rest_framework.test import APIClient

    first = Node.objects.order_by("slot").first()
    Node.objects.exclude(pk=first.pk).update(driver_version="580.82.07")
    Node.objects.filter(pk=first.pk).update(driver_version="575.57.08")
    api = APIClient()
    api.force_authenticate(tenant_a)
    body = {"metadata": {"name": "mixed"}, "spec": {"numNodes": 18}}
    resp = api.post("/api/v1/namespaces/team-a/computedomains/?dryRun=All", body, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["mixedDrivers"] == ["580.82.07 on 17 trays", "575.57.08 on 1 tray"]


# --- the calendar ------------------------------------------------------------------------------
def window(operator, starts: datetime, hours: int, **scope: object) -> None:
    maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=starts,
        ends_at=starts + timedelta(hours=hours),
        reason="switch firmware",
        **scope,
    )


def test_the_week_shows_each_window_on_its_racks_days_with_its_hours(client, operator, topology):
    monday = datetime(2030, 6, 3, tzinfo=UTC)
    window(operator, monday + timedelta(days=1, hours=22), 6, rack="gb-r01")
    client.force_login(operator)
    page = client.get(reverse("operator:calendar"), {"start": "2030-06-05"}).content.decode()
    assert "Week of Mon 3 Jun 2030 to Sun 9 Jun 2030" in page
    row = page.split('<tr data-rack="gb-r01">', 1)[1].split("</tr>", 1)[0]
    cells = row.split("<td")[1:]
    assert "from 22:00" in cells[1] and "until 04:00" in cells[2]
    assert "switch firmware" in cells[1] and "cal-entry" not in cells[0]


def test_the_month_shows_windows_by_day_and_an_empty_month_says_so(client, operator, topology):
    window(operator, datetime(2030, 6, 14, 2, tzinfo=UTC), 4, rack="gb-r01")
    client.force_login(operator)
    url = reverse("operator:calendar")
    page = client.get(url, {"view": "month", "start": "2030-06-01"}).content.decode()
    assert "June 2030" in page
    day = page.split('data-day="2030-06-14"', 1)[1].split("</td>", 1)[0]
    assert "02:00 to 06:00" in day and "(gb-r01)" in day
    empty = client.get(url, {"view": "month", "start": "2030-09-01"}).content.decode()
    assert 'id="calendar-empty"' in empty
    bad = client.get(url, {"start": "not-a-date"})
    assert bad.status_code == 200


# --- GPU health on the tray page and for tenants -------------------------------------------------
def test_the_tray_page_shows_each_gpus_readings_and_what_needs_attention(
    client, operator, topology
):
    node = Node.objects.order_by("slot").first()
    make_sick(node, index=1)
    client.force_login(operator)
    page = client.get(reverse("operator:node", args=[node.hostname])).content.decode()
    assert 'id="gpu-health"' in page
    row = page.split('<tr data-gpu="1" class="attention">', 1)[1].split("</tr>", 1)[0]
    assert "47 °C" in row and "615.0 W" in row and "(last: XID 79)" in row
    assert 'data-alert="xid"' in row
    fleet = client.get(reverse("operator:rack", args=["gb-r01"])).content.decode()
    assert f'data-hostname="{node.hostname}"' in fleet and 'data-gpu-alerts="xid"' in fleet


def test_a_tenant_is_told_which_of_their_trays_has_gpu_trouble_and_nothing_of_others(
    client, tenant_a, tenant_b, ns_a, ns_b, topology
):
    mine = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    theirs = form(request_domain(ns_b, tenant_b, "infer", num_nodes=2))
    for domain in (mine, theirs):
        make_sick(domain.members.order_by("index").first().node)
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", mine.uid])).content.decode()
    sick = mine.members.order_by("index").first().node.hostname
    assert 'id="gpu-trouble"' in page and f'data-tray="{sick}"' in page
    assert "GPU1 XID 79" in page
    other = theirs.members.order_by("index").first().node.hostname
    assert other not in page.split('id="gpu-trouble"', 1)[1].split("</section>", 1)[0]
    # On the drawing, another tenant's sick tray is just "in use".
    drawn = page.split(f'data-hostname="{other}"', 1)
    assert len(drawn) == 1 or "data-gpu-alerts" not in drawn[1].split(">", 1)[0]


def test_the_navigation_holds_the_new_pages_in_a_menu(client, admin, topology):
    client.force_login(admin)
    page = client.get(reverse("operator:fabric")).content.decode()
    assert 'id="nav-attention"' in page and 'id="nav-more"' in page and 'id="nav-admin"' in page
    assert reverse("operator:calendar") in page and reverse("operator:versions") in page


def test_a_window_in_the_next_hours_is_on_this_weeks_calendar(client, operator, topology):
    start = timezone.now() + timedelta(hours=1)
    window(operator, start, 2, trays=[Node.objects.order_by("slot").first().hostname])
    client.force_login(operator)
    page = client.get(reverse("operator:calendar")).content.decode()
    assert "switch firmware" in page
