"""What happens to a domain's members: their agents' reports, and the ways a tray stops
serving its domain (agent silent, tray declared down).

Each change locks the domain row, updates the member and folds the members' states into
the domain's phase (`phases.aggregate`), so the phase always follows its members.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from domains.audit.announce import announce_domain, announce_nodes
from domains.audit.events import Actor, record_event
from domains.computedomains.models import (
    NODE_REPORT,
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
)
from domains.computedomains.phases import aggregate, lock_domain, release_member
from domains.computedomains.selectors import RUNNING_PHASES


@dataclass(frozen=True)
class MemberReport:
    """What a member's agent observed, in the lifecycle's words (`domains.agents` turns its
    protocol's report into this)."""

    domain_uid: str | None  # the domain the tray serves or is tearing down
    state: str  # the MemberState the agent's step amounts to while the domain runs
    clean: bool  # no daemon, channel, config or CDI spec left on the tray
    generation_applied: int  # generation of the desired state the tray now matches
    step: str
    message: str
    daemon_state: str
    connections: dict[str, str]  # peer index → connection status


_STATE_STAMP: dict[str, str] = {
    MemberState.CONFIGURING: "configuring_at",
    MemberState.WAITING_PEERS: "waiting_peers_at",
    MemberState.READY: "ready_at",
}

# What deciding "this report changes nothing" reads: the steady state of every running tray
# costs one narrow query (the changing path re-reads the rows under a lock).
_UNCHANGED_CHECK_FIELDS = (
    "state", "step", "message", "daemon_state", "connections", "generation_applied",
    "domain__uid", "domain__phase", "domain__generation",
)  # fmt: skip


def domain_member_report(*, node_id: int, report: MemberReport) -> None:
    """Fold one agent report into its member's state and the domain's phase.

    Reports are level-triggered observations, so an old or repeated one is harmless: a
    report about another domain than the one holding the tray is ignored, and `ready`
    counts only for the generation the domain is at now. A report that changes nothing
    (the steady state of a running domain, every few seconds from every tray) costs one
    query and takes no lock.
    """
    current = (
        DomainMember.objects.select_related("domain")
        .filter(node_id=node_id, active=True)
        .order_by()
        .only(*_UNCHANGED_CHECK_FIELDS)
        .first()
    )
    if current is None or _outcome_unchanged(current.domain, current, report):
        return
    with transaction.atomic():
        domain = lock_domain(current.domain_id)
        member = (
            DomainMember.objects.select_related("node")
            .defer(NODE_REPORT)
            .filter(pk=current.pk, active=True)
            .order_by()
            .first()
        )
        if domain is None or member is None:
            return
        if _fold(domain, member, report):
            aggregate(domain)


def _outcome(domain: ComputeDomain, report: MemberReport) -> tuple[str, dict[str, Any]] | None:
    """(member state, fields) the report calls for; None when it is not about this domain
    or the domain is past listening. State RELEASED means: the tray is clean, let it go."""
    if report.domain_uid not in (None, str(domain.uid)):
        return None  # still about a domain the tray served before
    fields: dict[str, Any] = {
        "step": report.step[:64],
        "message": report.message[:2000],
        "daemon_state": report.daemon_state[:32],
        "connections": report.connections,
        "generation_applied": report.generation_applied,
    }
    if domain.phase == Phase.RELEASING:
        return (MemberState.RELEASED if report.clean else MemberState.RELEASING), fields
    if domain.phase in RUNNING_PHASES:
        state = report.state
        if state == MemberState.READY and report.generation_applied < domain.generation:
            state = MemberState.CONFIGURING  # ready, but for a desired state since replaced
        return state, fields
    return None


def _outcome_unchanged(domain: ComputeDomain, member: DomainMember, report: MemberReport) -> bool:
    outcome = _outcome(domain, report)
    if outcome is None:
        return True
    state, fields = outcome
    return state == member.state and all(getattr(member, k) == v for k, v in fields.items())


def _fold(domain: ComputeDomain, member: DomainMember, report: MemberReport) -> bool:
    """Update the member row from the report; True when its state changed."""
    outcome = _outcome(domain, report)
    if outcome is None:
        return False
    state, fields = outcome
    now = timezone.now()
    message = fields["message"]
    if state == MemberState.RELEASED:
        release_member(member, message=message or "agent confirmed a clean node", now=now)
        _member_event(domain, member, "member.released", message)
        return True
    changed = state != member.state
    if changed:
        fields.update(state=state, state_changed_at=now)
        if state in _STATE_STAMP:
            fields[_STATE_STAMP[state]] = now
    elif all(getattr(member, k) == v for k, v in fields.items()):
        return False
    DomainMember.objects.filter(pk=member.pk).update(**fields)
    if changed:
        member.state = state
        member.message = message
        _member_event(domain, member, f"member.{state}", message)
    return changed


def _member_event(domain: ComputeDomain, member: DomainMember, verb: str, message: str) -> None:
    record_event(
        actor=Actor.for_agent(member.node),
        verb=verb,
        obj=domain,
        node=member.node,
        message=f"{member.node.hostname} #{member.index}" + (f": {message}" if message else ""),
        details={"index": member.index, "state": member.state},
    )
    announce_nodes([member.node_id])
    announce_domain(domain)


# --- a tray that stops serving ----------------------------------------------------------------


def member_fail(member: DomainMember, *, message: str, now: datetime) -> None:
    """The one way a member fails: its tray stopped serving a running domain (agent silent,
    tray declared down). The caller holds the domain's lock and aggregates afterwards."""
    DomainMember.objects.filter(pk=member.pk).update(
        state=MemberState.FAILED, message=message[:2000], state_changed_at=now
    )
    member.state, member.message = MemberState.FAILED, message


def tray_marked_down(*, node_id: int, message: str) -> None:
    """A tray declared dead lets go of its domain, in the transaction that declared it.

    In a Releasing domain its membership ends at once (nobody will ever report it clean),
    which may finish that release; in a running domain the member fails, so the domain
    turns Degraded naming the tray.
    """
    member_id = (
        DomainMember.objects.filter(node_id=node_id, active=True)
        .values_list("domain_id", "pk")
        .first()
    )
    if member_id is None:
        return
    domain = lock_domain(member_id[0])
    if domain is None:
        return
    member = DomainMember.objects.select_related("node").get(pk=member_id[1])
    if domain.phase == Phase.RELEASING:
        release_member(member, message=message)
    elif domain.phase in RUNNING_PHASES:
        member_fail(member, message=message, now=timezone.now())
    aggregate(domain)
    announce_domain(domain)
