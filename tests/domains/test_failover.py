"""When a tray fails its domain is told the truth, and a placed domain gets a tray back:
an operator's mark-down wins over the agent's reports, a silent agent is not a dead daemon,
a lost tray is replaced by a free one of its clique (or the domain says what it waits for),
and the claims of a lost tray are let go of."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from agentwire.messages import ClaimRef, status_report
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.claims import claim_admit
from domains.computedomains.claimsweep import claims_release_lost
from domains.computedomains.failover import domains_replace_lost, member_replace
from domains.computedomains.members import domain_member_report
from domains.computedomains.models import (
    DomainClaim,
    DomainMember,
    MemberState,
    Phase,
    ReplacePolicy,
)
from domains.computedomains.reconcile import reap_stale_heartbeats
from domains.computedomains.trays import tray_act
from domains.errors import InvalidInput
from domains.inventory.models import Node
from testbed import factories
from tests.support.lifecycle import all_ready, form, ready_report, request_domain

pytestmark = pytest.mark.django_db


def members(domain) -> dict[int, DomainMember]:
    return {
        m.index: m
        for m in DomainMember.objects.select_related("node").filter(domain=domain, active=True)
    }


def mark_down(operator, node: Node, reason: str = "PSU fault") -> None:
    actor = Actor.for_user(operator)
    tray_act(actor=actor, node=node, action="drain")
    tray_act(actor=actor, node=node, action="mark_down", reason=reason)


@pytest.fixture
def train(topology, ns_a, tenant_a):
    """team-a/train Ready on three trays of the 18-tray clique."""
    return form(request_domain(ns_a, tenant_a, "train", num_nodes=3))


# --- an operator's mark-down wins -------------------------------------------------------------


def test_a_tray_marked_down_stays_down_while_its_agent_still_reports_ready(
    train, operator, settings
):
    settings.PORTAL = {**settings.PORTAL, "FAILOVER_GRACE": timedelta(hours=1)}
    train.replace_policy = ReplacePolicy.MANUAL  # keep the lost member, to see it stay down
    train.save(update_fields=["replace_policy"])
    tray = members(train)[1].node
    mark_down(operator, tray)
    train.refresh_from_db()
    assert train.phase == Phase.DEGRADED
    # Its agent runs on and reports its daemon READY: the operator's word wins.
    for _ in range(2):
        domain_member_report(node_id=tray.pk, report=ready_report(train))
    train.refresh_from_db()
    assert train.phase == Phase.DEGRADED
    assert members(train)[1].state == MemberState.FAILED
    assert not Event.objects.filter(domain=train, verb="domain.recovered").exists()


# --- a silent agent is not a dead daemon --------------------------------------------------------


def test_a_silent_agent_makes_its_member_silent_not_failed_and_says_what_is_known(train):
    tray = members(train)[0].node
    Node.objects.filter(pk=tray.pk).update(daemon_state="READY")
    factories.stale_heartbeat(tray, timedelta(seconds=45))
    assert reap_stale_heartbeats() == 1
    train.refresh_from_db()
    member = members(train)[0]
    assert member.state == MemberState.SILENT
    assert train.phase == Phase.DEGRADED and train.reason == "AgentSilent"
    assert "agent has not reported since" in train.message
    assert "its IMEX daemon was last READY" in train.message
    assert "failed" not in train.message
    # Its agent back: the member is ready again, and the tenant hears the tray is back.
    domain_member_report(node_id=tray.pk, report=ready_report(train))
    train.refresh_from_db()
    assert train.phase == Phase.READY
    back = Event.objects.get(domain=train, verb="domain.tray_back")
    assert tray.hostname in back.message and "reports again" in back.message


# --- failover ----------------------------------------------------------------------------------


def test_a_tray_marked_down_is_replaced_by_a_free_tray_of_its_clique(train, operator):
    lost = members(train)[1]
    mark_down(operator, lost.node)
    assert domains_replace_lost() == 1  # the failover task, queued by the mark-down
    train.refresh_from_db()
    now = members(train)
    assert set(now) == {0, 1, 2}
    new = now[1].node
    assert new.pk != lost.node.pk and new.clique_id == lost.node.clique_id
    assert not DomainMember.objects.get(pk=lost.pk).active
    said = Event.objects.get(domain=train, verb="domain.member_replaced")
    assert said.message.startswith(f"{lost.node.hostname} replaced by {new.hostname}")
    assert "is down: PSU fault" in said.message
    assert train.phase == Phase.DEGRADED
    # The new tray forms in: Ready again.
    all_ready(train)
    train.refresh_from_db()
    assert train.phase == Phase.READY


def test_a_tray_whose_agent_is_silent_past_the_grace_is_replaced_and_not_before(train, settings):
    settings.PORTAL = {**settings.PORTAL, "FAILOVER_GRACE": timedelta(seconds=60)}
    tray = members(train)[2].node
    factories.stale_heartbeat(tray, timedelta(seconds=40))
    reap_stale_heartbeats()
    assert domains_replace_lost() == 0
    factories.stale_heartbeat(tray, timedelta(seconds=90))
    assert domains_replace_lost() == 1
    assert members(train)[2].node.pk != tray.pk


def test_with_no_free_tray_the_domain_stays_degraded_and_says_what_it_waits_for(
    ns_a, tenant_a, operator
):
    factories.make_racks("3", ip_prefix=factories.tray_ip_prefix(41))
    domain = form(request_domain(ns_a, tenant_a, "full", num_nodes=3))
    tray = members(domain)[0].node
    mark_down(operator, tray)
    assert domains_replace_lost() == 0
    domain.refresh_from_db()
    assert domain.phase == Phase.DEGRADED and domain.reason == "WaitingForTray"
    assert domain.message.startswith(f"tray {tray.hostname} is down: PSU fault; waiting for")
    assert "no free tray in clique" in domain.message
    assert Event.objects.filter(domain=domain, verb="domain.waiting_for_tray").count() == 1
    domains_replace_lost()  # the same story: told once
    assert Event.objects.filter(domain=domain, verb="domain.waiting_for_tray").count() == 1


def test_a_domain_that_opted_out_waits_for_an_operator_who_picks_the_tray(
    topology, ns_a, tenant_a, operator
):
    domain = form(
        request_domain(ns_a, tenant_a, "manual", num_nodes=2, replace_policy=ReplacePolicy.MANUAL)
    )
    lost = members(domain)[0]
    mark_down(operator, lost.node)
    assert domains_replace_lost() == 0
    domain.refresh_from_db()
    assert "replaced by an operator (replace: manual)" in domain.message
    held = {m.node_id for m in DomainMember.objects.filter(active=True)}
    spare = Node.objects.filter(clique=lost.node.clique).exclude(pk__in=held).order_by("-slot")[0]
    with pytest.raises(InvalidInput, match="not a free tray"):
        member_replace(domain_id=domain.pk, member_id=lost.pk, hostname="gb-nope")
    done = member_replace(
        domain_id=domain.pk,
        member_id=lost.pk,
        hostname=spare.hostname,
        actor=Actor.for_user(operator),
    )
    assert done is not None and (done.old, done.new) == (lost.node.hostname, spare.hostname)
    assert members(domain)[0].node == spare


# --- claims of a lost tray ----------------------------------------------------------------------


def claim(name: str) -> ClaimRef:
    return ClaimRef(uid=str(uuid.uuid4()), namespace="team-a", name=name)


def test_the_claims_of_a_dead_tray_are_released_and_a_following_domain_lets_it_go(
    topology, ns_a, tenant_a, operator, settings
):
    settings.PORTAL = {**settings.PORTAL, "UNVERIFIED_JOINS": True}
    domain = request_domain(ns_a, tenant_a, "wl", num_nodes=0)
    first, second = Node.objects.filter(clique=domain.cliques.get()).order_by("slot")[:2]
    for node, name in ((first, "a"), (second, "b")):
        claim_admit(node=node, claim=claim(name), domain_uid=str(domain.uid))
    domain.refresh_from_db()
    for node in (first, second):
        domain_member_report(
            node_id=node.pk, report=ready_report(domain) | {"daemon_state": "READY"}
        )
    # The first tray dies: its agent never unprepares its claim.
    factories.stale_heartbeat(first, timedelta(hours=1))
    assert claims_release_lost() == 1
    gone = DomainClaim.objects.get(node=first)
    assert gone.released_at is not None and "has not reported" in gone.refusal
    released = Event.objects.get(domain=domain, verb="claim.released")
    assert first.hostname in released.message
    # Its tray left the domain: its index and its share of the quota are free again.
    assert {m.node_id for m in DomainMember.objects.filter(domain=domain, active=True)} == {
        second.pk
    }
    assert claims_release_lost() == 0


def test_a_report_from_a_replaced_tray_changes_nothing(train, operator):
    lost = members(train)[1].node
    mark_down(operator, lost)
    domains_replace_lost()
    report = status_report(
        domain_uid=str(train.uid), generation_applied=train.generation, step="ready"
    )
    domain_member_report(node_id=lost.pk, report=report)
    assert not DomainMember.objects.filter(node=lost, active=True).exists()


def test_a_replacement_and_a_tray_back_in_service_are_notified_to_the_tenant(
    train, operator, tenant_a
):
    from domains.notifications.dispatch import notify_event
    from domains.notifications.services import subscription_create

    inbox = subscription_create(user=tenant_a, channel="in_app", kinds=["domain.tray_back"])
    actor = Actor.for_user(operator)
    cordoned = members(train)[0].node
    tray_act(actor=actor, node=cordoned, action="cordon")
    tray_act(actor=actor, node=cordoned, action="uncordon")
    mark_down(operator, members(train)[1].node)
    domains_replace_lost()
    for event in Event.objects.filter(
        domain=train, verb__in=["domain.tray_back", "domain.member_replaced"]
    ):
        notify_event(event_id=event.pk)
    titles = sorted(n.title for n in inbox.notifications.all())
    assert titles == [
        "A tray of team-a/train is back in service",
        "A tray of team-a/train was replaced",
    ]
