"""A domain's life through the services, on PostgreSQL: request → Ready → Released."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentwire.messages import Step, status_report
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.fabric import fabric_read, topology_snapshot
from domains.computedomains.members import domain_member_report
from domains.computedomains.models import ChannelAllocation, MemberState, Phase
from domains.computedomains.placing import (
    domain_place,
    domains_place_burst,
    domains_place_queued,
)
from domains.computedomains.reconcile import reap_stale_heartbeats, reconcile
from domains.computedomains.selectors import desired_member, domain_channels, domain_peers
from domains.computedomains.services import domain_extend_lease, domain_release, domain_request
from domains.computedomains.specs import DomainSpec
from domains.context import request_id_scope
from domains.errors import InvalidInput, InvalidTransition, QuotaExceeded
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon, node_mark_down, node_uncordon
from domains.placement.model import TrayStatus
from domains.tenancy.services import quota_set
from testbed import factories
from tests.support.lifecycle import (
    all_clean,
    all_ready,
    ready_report,
    report,
    request_and_place,
    request_domain,
)

pytestmark = pytest.mark.django_db


def test_a_domain_forms_runs_and_releases(topology, ns_a, tenant_a):
    actor = Actor.for_user(tenant_a)
    domain = domain_request(actor=actor, namespace=ns_a, spec=DomainSpec(name="train", num_nodes=4))
    assert domain.phase == Phase.ADMITTED

    domain = domain_place(domain_id=domain.pk)
    assert domain.phase == Phase.FORMING
    peers = domain_peers(domain)
    assert [m.index for m in peers] == [0, 1, 2, 3]
    assert domain_channels(domain) == [1]
    assert desired_member(peers[0].node).domain == domain

    report(peers[0].node, domain, Step.CONFIGURING)
    all_ready(domain)
    domain.refresh_from_db()
    assert domain.phase == Phase.READY
    assert domain.lease_expires_at is not None

    domain_release(actor=actor, domain=domain)
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASING
    all_clean(domain)
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASED
    assert not ChannelAllocation.objects.filter(released_at__isnull=True).exists()
    assert desired_member(peers[0].node) is None
    verbs = list(Event.objects.filter(domain=domain).order_by("id").values_list("verb", flat=True))
    assert verbs[0] == "domain.requested" and verbs[-1] == "domain.released"
    assert all(m.state == MemberState.RELEASED for m in domain.members.all())


def test_ready_needs_the_current_generation_from_every_member(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    first, second, third = domain_peers(domain)
    report(first.node, domain, Step.READY)
    report(second.node, domain, Step.READY, generation=domain.generation - 1)
    report(third.node, domain, Step.WAITING_PEERS, message="peer 1 never connected")
    domain.refresh_from_db()
    assert domain.phase == Phase.FORMING
    assert domain.message == "1 of 3 members ready"
    report(second.node, domain, Step.READY)
    report(third.node, domain, Step.READY)
    domain.refresh_from_db()
    assert domain.phase == Phase.READY


def test_a_failing_member_degrades_the_domain_and_recovery_restores_it(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    all_ready(domain)
    member = domain_peers(domain)[1]
    report(member.node, domain, Step.FAILED, error="nvidia-imex exited with status 1")
    domain.refresh_from_db()
    assert (domain.phase, domain.reason) == (Phase.DEGRADED, "MemberNotReady")
    assert domain.message == ("gb-r01-t02 failed: nvidia-imex exited with status 1 (step failed)")
    report(member.node, domain, Step.READY)
    domain.refresh_from_db()
    assert (domain.phase, domain.message) == (Phase.READY, "recovered: all 3 members ready")
    verbs = set(Event.objects.filter(domain=domain).values_list("verb", flat=True))
    assert {"domain.degraded", "domain.recovered", "member.failed"} <= verbs


def test_a_report_about_another_domain_changes_nothing(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a)
    node = domain_peers(domain)[0].node
    domain_member_report(
        node_id=node.pk,
        report=status_report(domain_uid=str(uuid.uuid4()), generation_applied=9, step=Step.READY),
    )
    assert domain_peers(domain)[0].state == MemberState.ASSIGNED


def test_release_is_idempotent_and_waits_for_clean_nodes(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    all_ready(domain)
    domain.refresh_from_db()
    generation = domain.generation
    actor = Actor.for_user(tenant_a)
    domain_release(actor=actor, domain=domain)
    domain_release(actor=actor, domain=domain)
    domain.refresh_from_db()
    assert (domain.phase, domain.generation) == (Phase.RELEASING, generation + 1)
    assert Event.objects.filter(domain=domain, verb="domain.release_requested").count() == 1
    first, second = domain_peers(domain)
    report(first.node, domain, Step.RELEASING)  # tearing down, not clean yet
    report(first.node, None, Step.IDLE, clean=True)
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASING  # the second tray has not confirmed
    report(second.node, None, Step.IDLE, clean=True)
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASED
    domain_release(actor=actor, domain=domain)
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASED


def test_releasing_a_queued_domain_ends_it_at_once(topology, ns_a, tenant_a):
    domain = domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="q", num_nodes=2)
    )
    released = domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    assert released.phase == Phase.RELEASED
    assert domain_place(domain_id=domain.pk) is None


def test_a_dead_tray_marked_down_lets_a_release_finish(topology, ns_a, tenant_a, operator):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    all_ready(domain)
    first, second = domain_peers(domain)
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    report(first.node, None, Step.IDLE, clean=True)
    node_mark_down(actor=Actor.for_user(operator), node=second.node, reason="PSU dead")
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASED
    assert domain_peers(domain)[1].message == "tray declared down by an operator: PSU dead"


def test_marking_a_running_tray_down_degrades_its_domain(topology, ns_a, tenant_a, operator):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    all_ready(domain)
    node_mark_down(actor=Actor.for_user(operator), node=domain_peers(domain)[0].node)
    domain.refresh_from_db()
    assert domain.phase == Phase.DEGRADED
    assert domain.message.startswith("gb-r01-t01 failed: tray declared down")


def test_single_domains_get_the_first_free_channel_of_their_clique(topology, ns_a, tenant_a):
    one = request_and_place(ns_a, tenant_a, name="one", num_nodes=1)
    two = request_and_place(ns_a, tenant_a, name="two", num_nodes=1)
    every = request_and_place(ns_a, tenant_a, name="every", num_nodes=1, allocation_mode="All")
    three = request_and_place(ns_a, tenant_a, name="three", num_nodes=1)
    assert [domain_channels(d) for d in (one, two, three)] == [[1], [2], [3]]
    assert domain_channels(every) == list(range(2048))  # channel 0 too, as NVIDIA's driver
    assert not ChannelAllocation.objects.filter(domain=every).exists()
    domain_release(actor=Actor.for_user(tenant_a), domain=two)
    all_clean(two)
    four = request_and_place(ns_a, tenant_a, name="four", num_nodes=1)
    assert domain_channels(four) == [2]  # channel 2 came back to the pool
    assert domain_channels(two) == []


def test_a_queued_domain_is_placed_when_capacity_frees_first_come_first_served(topology, tenant_a):
    ns = factories.make_namespace("unlimited")
    big = request_and_place(ns, tenant_a, name="big", num_nodes=12)
    waiting = request_and_place(ns, tenant_a, name="waiting", num_nodes=8)
    assert (waiting.phase, waiting.reason) == (Phase.ADMITTED, "Unschedulable")
    assert waiting.message.startswith(
        "needs 8 free trays in one clique; best is rack gb-r01 clique gb-r01-c0 with 6 free"
    )
    later = request_and_place(ns, tenant_a, name="later", num_nodes=11)
    assert later.phase == Phase.ADMITTED
    domain_release(actor=Actor.for_user(tenant_a), domain=big)
    all_clean(big)
    assert domains_place_queued() == 1  # "waiting" (8 of 18) first; then 11 no longer fits
    waiting.refresh_from_db()
    later.refresh_from_db()
    assert (waiting.phase, later.phase) == (Phase.FORMING, Phase.ADMITTED)


def test_a_burst_of_requests_is_placed_in_one_pass_oldest_first(topology, tenant_a):
    ns = factories.make_namespace("unlimited")
    domains = [request_domain(ns, tenant_a, name=f"b{i}", num_nodes=6) for i in range(4)]
    with CaptureQueriesContext(connection) as burst:
        handled = domains_place_burst(domain_id=domains[1].pk)
    assert [d.pk for d in handled] == [d.pk for d in domains]  # all four, oldest first
    for d in domains:
        d.refresh_from_db()
    assert [d.phase for d in domains] == [Phase.FORMING] * 3 + [Phase.ADMITTED]
    assert domains[3].reason == "Unschedulable"  # 18 trays: three of six, then none
    trays = [m.node_id for d in domains[:3] for m in domain_peers(d)]
    assert len(trays) == len(set(trays)) == 18  # the fabric read once, taken in memory
    assert sum("inventory_node" in q["sql"] for q in burst.captured_queries) == 1
    # The later requests' own tasks find nothing new to do; the unschedulable one waits for
    # capacity (the queue pass), not for every burst.
    assert domains_place_burst(domain_id=domains[2].pk) == []


def test_cordoned_and_silent_trays_take_no_new_domain(topology, ns_a, tenant_a, operator):
    nodes = list(Node.objects.order_by("slot"))
    node_cordon(actor=Actor.for_user(operator), node=nodes[0])
    factories.stale_heartbeat(nodes[1])
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    assert [m.node.slot for m in domain_peers(domain)] == [3, 4]
    node_uncordon(actor=Actor.for_user(operator), node=nodes[0])
    assert Node.objects.get(pk=nodes[0].pk).state == NodeState.READY


def test_the_formation_deadline_fails_the_domain_naming_the_stuck_tray(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    first, second, third = domain_peers(domain)
    report(first.node, domain, Step.READY)
    report(second.node, domain, Step.WAITING_PEERS, message="peer 2 unreachable")
    done = reconcile(now=timezone.now() + timedelta(minutes=10))
    assert done["deadline"] == 1
    domain.refresh_from_db()
    assert (domain.phase, domain.reason) == (Phase.FAILED, "FormationTimeout")
    assert domain.message == (
        "formation deadline passed: gb-r01-t02 (#1) stuck at step waiting_peers; "
        "agent said: peer 2 unreachable"
    )
    assert not domain.members.filter(active=True).exists()
    assert not ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True).exists()
    assert desired_member(third.node) is None


def test_an_expired_lease_releases_the_domain(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2, lifetime=timedelta(hours=1))
    all_ready(domain)
    assert reconcile(now=timezone.now() + timedelta(minutes=30))["expired"] == 0
    assert reconcile(now=timezone.now() + timedelta(hours=2))["expired"] == 1
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASING
    event = Event.objects.get(domain=domain, verb="domain.release_requested")
    assert (event.actor_name, event.message) == (
        "controller",
        "release requested by controller: lease expired",
    )


def test_a_lease_extends_within_the_maximum_lifetime(topology, ns_a, tenant_a, admin):
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, max_lifetime=timedelta(hours=4))
    domain = request_and_place(ns_a, tenant_a, lifetime=timedelta(hours=2))
    with pytest.raises(InvalidTransition):
        domain_extend_lease(actor=Actor.for_user(tenant_a), domain=domain, by=timedelta(hours=1))
    all_ready(domain)
    domain.refresh_from_db()
    end = domain.lease_expires_at
    extended = domain_extend_lease(
        actor=Actor.for_user(tenant_a), domain=domain, by=timedelta(hours=1)
    )
    assert extended.lease_expires_at == end + timedelta(hours=1)
    with pytest.raises(QuotaExceeded) as exc:
        domain_extend_lease(actor=Actor.for_user(tenant_a), domain=domain, by=timedelta(hours=2))
    assert exc.value.field == "by"


def test_a_silent_ready_member_degrades_its_domain(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    all_ready(domain)
    node = domain_peers(domain)[1].node
    factories.stale_heartbeat(node)
    assert reap_stale_heartbeats() == 1
    domain.refresh_from_db()
    assert domain.phase == Phase.DEGRADED
    assert domain.message.startswith("gb-r01-t02: its agent has not reported since")
    report(node, domain, Step.READY)
    domain.refresh_from_db()
    assert domain.phase == Phase.READY


def test_reconcile_finishes_what_a_lost_report_left(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    domain.members.update(state=MemberState.READY)  # as if the aggregation step was lost
    assert reconcile()["aggregated"] == 1
    domain.refresh_from_db()
    assert domain.phase == Phase.READY


def test_the_topology_snapshot_takes_constant_queries(django_assert_num_queries, ns_a, tenant_a):
    factories.make_racks("18", "9,9", "6,6,6", ip_prefix="127.11")
    request_and_place(ns_a, tenant_a, num_nodes=3)
    with django_assert_num_queries(3):  # trays, cliques, maintenance windows
        small = topology_snapshot()
    factories.make_racks(*["18"] * 6, ip_prefix="127.11", first_rack=4)
    with django_assert_num_queries(3):  # trays, cliques, maintenance windows
        large = topology_snapshot()
    assert (small.tray_count(), large.tray_count()) == (54, 162)
    statuses = [t.status for c in small.cliques for t in c.trays]
    assert statuses.count(TrayStatus.IN_USE) == 3


def test_fabric_summaries_use_the_configured_smallest_request(topology, ns_a, tenant_a, settings):
    request_and_place(ns_a, tenant_a, num_nodes=12)
    (summary,) = fabric_read().summaries
    assert (summary.free, summary.in_use, summary.stranded) == (6, 12, 0)
    settings.PORTAL = {**settings.PORTAL, "SMALLEST_REQUEST_NODES": 8}
    assert fabric_read().summaries[0].stranded == 6


def test_a_report_that_changes_nothing_costs_one_query(
    topology, ns_a, tenant_a, django_assert_num_queries
):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    all_ready(domain)
    domain.refresh_from_db()
    node = domain_peers(domain)[0].node
    steady = ready_report(domain)  # the report every member sent last
    with django_assert_num_queries(1):
        domain_member_report(node_id=node.pk, report=steady)


def test_controller_events_carry_the_request_id_of_the_request(topology, ns_a, tenant_a):
    with request_id_scope("req-1234"):
        domain = domain_request(
            actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="t", num_nodes=2)
        )
    domain_place(domain_id=domain.pk)  # as a beat pass would: no request id of its own
    reconcile(now=timezone.now() + timedelta(minutes=10))  # formation deadline
    ids = dict(Event.objects.filter(domain=domain).values_list("verb", "request_id"))
    assert ids == {
        "domain.requested": "req-1234",
        "domain.admitted": "req-1234",
        "domain.placed": "req-1234",
        "domain.failed": "req-1234",
    }


def test_the_smallest_allowed_request_is_enforced_at_admission(topology, ns_a, tenant_a, settings):
    settings.PORTAL = {**settings.PORTAL, "SMALLEST_REQUEST_NODES": 2}
    with pytest.raises(InvalidInput) as refused:
        domain_request(
            actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="one", num_nodes=1)
        )
    assert refused.value.field == "num_nodes" and "between 2 and 18" in str(refused.value)


def test_a_tray_without_a_management_ip_is_never_placed(topology, ns_a, tenant_a):
    first = Node.objects.filter(rack=topology).order_by("slot").first()
    Node.objects.filter(pk=first.pk).update(management_ip=None)
    statuses = {t.node_id: t.status for c in topology_snapshot().cliques for t in c.trays}
    assert statuses[first.pk] == TrayStatus.NO_ADDRESS
    domain = request_and_place(ns_a, tenant_a, num_nodes=12)
    assert domain.phase == Phase.FORMING
    assert not domain.members.filter(node=first).exists()
