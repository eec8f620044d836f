"""The operators' needs-attention list: every reason with why, since when and what to do,
filterable and sortable, for operators only, and at a cost that does not grow."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agentwire.messages import status_report
from domains.agents.gpuhealth import gpu_health_record
from domains.agents.heartbeats import stored_report
from domains.attention.selectors import needs_attention
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain, Phase
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_drain, node_mark_down
from domains.tenancy.services import quota_set
from testbed import factories
from tests.support.lifecycle import request_domain

pytestmark = pytest.mark.django_db


def sick(node: Node, index: int = 2, **values: object) -> None:
    gpu = node.gpus.get(index=index)
    base = {
        "index": index, "uuid": gpu.uuid, "temperature_c": 50, "power_mw": 600_000,
        "xid_count": 0, "last_xid": 0, "nvlink_crc_flit_errors": 0, "nvlink_crc_data_errors": 0,
        "nvlink_replay_errors": 0, "nvlink_recovery_errors": 0, "ecc_corrected": 0,
        "ecc_uncorrected": 0,
    }  # fmt: skip
    gpu_health_record(node_id=node.pk, samples=[base])  # type: ignore[list-item]
    gpu_health_record(node_id=node.pk, samples=[base | values])  # type: ignore[list-item]


@pytest.fixture
def trouble(operator, admin, tenant_a, ns_a, topology):
    """One tray of each kind of trouble, and a request waiting for approval."""
    actor = Actor.for_user(operator)
    trays = list(Node.objects.order_by("slot"))
    node_mark_down(actor=actor, node=trays[0], reason="PSU smoke")
    factories.stale_heartbeat(trays[1])
    exited = status_report(
        step="starting_daemon", error="nvidia-imex exited (status 1); restarted it"
    )
    Node.objects.filter(pk=trays[2].pk).update(agent_report=stored_report(exited, timezone.now()))
    sick(trays[3], xid_count=1, last_xid=79)
    node_drain(actor=actor, node=trays[4], reason="firmware")
    Event.objects.filter(node=trays[4], verb="node.draining").update(
        created_at=timezone.now() - timedelta(hours=5)
    )
    Node.objects.filter(pk=trays[5].pk).update(state=NodeState.PENDING)
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=1)
    request_domain(ns_a, tenant_a, "big", num_nodes=2)
    return trays


def test_every_kind_of_trouble_is_listed_with_why_since_and_actions(trouble):
    items = {i.subject: i for i in needs_attention()}
    down, silent, daemon, gpu, draining, pending = trouble[:6]
    assert (items[down.hostname].kind, items[down.hostname].why) == ("down", "PSU smoke")
    assert items[down.hostname].actions == ("mark_up",)
    assert items[silent.hostname].kind == "silent"
    assert items[silent.hostname].actions == ("cordon", "mark_down")
    assert items[daemon.hostname].kind == "daemon"
    assert items[daemon.hostname].why.startswith("nvidia-imex exited")
    assert (items[gpu.hostname].kind, items[gpu.hostname].why) == ("gpu", "GPU2 XID 79")
    assert items[draining.hostname].kind == "draining"
    assert items[pending.hostname].actions == ("accept",)
    approval = items["team-a/big"]
    assert approval.kind == "approval" and approval.why == "asks for 2 trays"
    assert all(i.since is not None for i in items.values())


def test_a_tray_draining_a_short_while_is_not_listed(operator, topology):
    tray = Node.objects.order_by("slot").first()
    node_drain(actor=Actor.for_user(operator), node=tray, reason="firmware")
    assert [i for i in needs_attention() if i.subject == tray.hostname] == []


def test_a_degraded_domain_is_listed_since_it_degraded(ns_a, tenant_a, topology):
    domain = request_domain(ns_a, tenant_a, "train", num_nodes=2)
    ComputeDomain.objects.filter(pk=domain.pk).update(phase=Phase.DEGRADED, message="lost t01")
    (item,) = [i for i in needs_attention() if i.kind == "degraded"]
    assert (item.subject, item.why, item.actions) == ("team-a/train", "lost t01", ("open",))


def test_the_page_filters_sorts_and_offers_each_action_one_click_away(client, admin, trouble):
    client.force_login(admin)
    url = reverse("operator:attention")
    page = client.get(url).content.decode()
    assert page.count('<tr data-kind="') == 7
    down = trouble[0].hostname
    assert f'href="/fabric/nodes/{down}/mark_up/"' in page
    assert f'href="/fabric/nodes/{trouble[5].hostname}/#accept"' in page
    assert "Approve or deny…" in page
    only_gpu = client.get(url, {"kind": "gpu"}).content.decode()
    assert only_gpu.count('<tr data-kind="') == 1 and "1 of 7 shown" in only_gpu
    by_name = client.get(url, {"q": trouble[1].hostname}).content.decode()
    assert by_name.count('<tr data-kind="') == 1
    newest_first = client.get(url, {"sort": "-since"}).content.decode()
    assert 'aria-sort="descending"' in newest_first
    partial = client.get(url, {"partial": "1"}).content.decode()
    assert "<html" not in partial and partial.count('<tr data-kind="') == 7


def test_tenants_may_not_see_the_list(client, tenant_a, topology):
    client.force_login(tenant_a)
    assert client.get(reverse("operator:attention")).status_code in (302, 403)


def test_the_list_costs_the_same_queries_however_much_needs_attention(client, operator, trouble):
    client.force_login(operator)
    url = reverse("operator:attention")
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    more = factories.make_racks("18", ip_prefix=factories.tray_ip_prefix(14), first_rack=2)
    for node in Node.objects.filter(rack=more[0])[:6]:
        factories.stale_heartbeat(node)
        sick(node, xid_count=2, last_xid=48)
    with CaptureQueriesContext(connection) as many:
        assert client.get(url).status_code == 200
    assert len(many) == len(few)


def test_a_whole_fleet_gone_silent_is_listed_a_page_at_a_time_with_counts(client, operator):
    factories.make_racks(*["18"] * 6, ip_prefix=factories.tray_ip_prefix(14))
    Node.objects.update(last_heartbeat=timezone.now() - timedelta(minutes=30))
    client.force_login(operator)
    url = reverse("operator:attention")
    first = client.get(url).content.decode()
    assert first.count('<tr data-kind="silent"') == 100 and "Page 1 of 2" in first
    assert "108 things need attention." in first
    second = client.get(url, {"page": 2}).content.decode()
    assert second.count('<tr data-kind="silent"') == 8
