"""What happens to a domain's members: their agents' reports, and the ways a tray stops
serving its domain (agent silent, tray declared down).

Each change locks the domain row, updates the members and folds the members' states into
the domain's phase (`phases.aggregate`), so the phase always follows its members. Reports
are folded per domain and in batches (`domain_members_report`): the 18 trays of a rack
report "ready" within milliseconds of each other, and one transaction for all of them (one
lock, one UPDATE, one INSERT of their events, one aggregation) costs what one of them did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from agentwire.messages import StatusReport, Step
from domains.audit.events import Actor, new_event, record_events
from domains.computedomains.models import (
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
)
from domains.computedomains.phases import aggregate, lock_domain, release_member
from domains.computedomains.selectors import RUNNING_PHASES
from domains.inventory.models import NodeState
from domains.signals import announce_domain, announce_failover_wanted, announce_nodes

# A tray of a running domain is back in service (uncordoned, marked up, its agent reporting
# again, or a replacement formed in): recorded on the domain, so its tenant hears it.
TRAY_BACK_VERB = "domain.tray_back"

# What each step of the agent means for its member while the domain runs.
STEP_STATE = {
    Step.CONFIGURING: MemberState.CONFIGURING,
    Step.STARTING_DAEMON: MemberState.CONFIGURING,
    Step.WAITING_PEERS: MemberState.WAITING_PEERS,
    Step.READY: MemberState.READY,
    Step.FAILED: MemberState.FAILED,
    Step.RELEASING: MemberState.CONFIGURING,  # tearing down something else first
    Step.IDLE: MemberState.ASSIGNED,  # has not picked the domain up yet
}


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
# The member's fields a report may change (compared to decide whether it changes anything).
REPORTED_FIELDS = ("state", "step", "message", "daemon_state", "connections", "generation_applied")
# What folding reads of each member: the reported fields, and what aggregation and the
# events say.
_FOLD_FIELDS = (
    *REPORTED_FIELDS, "domain_id", "node_id", "index", "clique_id", "active", "ready_at",
    "node__hostname", "node__state",
)  # fmt: skip
_FOLD_STORED_FIELDS = (*_FOLD_FIELDS, "assigned_at", "node__agent_report")


def domain_member_report(*, node_id: int, report: StatusReport) -> None:
    """Fold one agent report into its member's state and the domain's phase, now.

    Reports are level-triggered observations, so an old or repeated one is harmless: a
    report about another domain than the one holding the tray is ignored, and `ready`
    counts only for the generation the domain is at now. A report that changes nothing
    (the steady state of a running domain, every few seconds from every tray) costs one
    query and takes no lock.
    """
    current = (
        DomainMember.objects.select_related("domain", "node")
        .filter(node_id=node_id, active=True)
        .order_by()
        .only(*_UNCHANGED_CHECK_FIELDS, "node__state")
        .first()
    )
    if current is None:
        return
    domain = current.domain
    member = {name: getattr(current, name) for name in REPORTED_FIELDS}
    if report_changes_member(
        uid=str(domain.uid),
        phase=domain.phase,
        generation=domain.generation,
        member=member,
        report=report,
        tray_state=current.node.state,
    ):
        domain_members_report(domain_id=current.domain_id, reports={node_id: report})


def report_changes_member(
    *,
    uid: str,
    phase: str,
    generation: int,
    member: Mapping[str, Any],
    report: StatusReport,
    tray_state: str = "",
) -> bool:
    """Whether folding `report` would change the member (its `REPORTED_FIELDS` given), in a
    domain with this uid, phase and generation, of a tray in `tray_state`. No query: the
    agents' heartbeat reads these along with its own UPDATE."""
    if _marked_down(phase, tray_state):
        return False
    outcome = _outcome(uid, phase, generation, report)
    if outcome is None:
        return False
    state, fields = outcome
    return state != member["state"] or any(member[k] != v for k, v in fields.items())


def domain_members_report(
    *,
    domain_id: int,
    reports: Mapping[int, StatusReport] | None = None,
    stored: bool = False,
) -> int:
    """Fold the reports (node id → its agent's latest report) of one domain's members in one
    transaction, and the members' states into the phase once. Returns how many members
    changed. Reports of trays that hold no active membership in the domain are ignored.

    `stored` instead of `reports`: each active member's report is the one its tray stored
    (`Node.agent_report`), read with the members themselves (one query, not two)."""
    with transaction.atomic():
        domain = lock_domain(domain_id)
        if domain is None:
            return 0
        columns = _FOLD_STORED_FIELDS if stored else _FOLD_FIELDS
        members = list(
            DomainMember.objects.filter(domain_id=domain_id)
            .select_related("node")
            .only(*columns)
            .order_by("index")
        )
        if stored:
            reports = _stored_reports(domain, members)
        elif reports is None:
            raise TypeError("domain_members_report needs reports or stored")
        now = timezone.now()
        writes: dict[str, tuple[dict[str, Any], list[int]]] = {}
        events = []
        for member in members:
            report = reports.get(member.node_id)
            if report is None or not member.active:
                continue
            was = member.state
            folded = _fold(domain, member, report, now)
            if folded is None:
                continue
            verb, fields = folded
            if was == MemberState.SILENT and member.state != MemberState.SILENT:
                events.append(_agent_back(domain, member))
            # Members of a burst mostly change alike ("ready", all peers connected, one
            # stamp): one UPDATE per distinct change, not one per member.
            key = json.dumps(fields, sort_keys=True, cls=DjangoJSONEncoder)
            writes.setdefault(key, (fields, []))[1].append(member.pk)
            if verb:
                message = member.message if verb != "member.released" else _said(report)
                events.append(_member_event(domain, member, verb, message[:2000]))
        if not writes:
            return 0
        for fields, pks in writes.values():
            DomainMember.objects.filter(pk__in=pks).update(**fields)
        record_events(events)
        if events:
            announce_nodes([e.node_id for e in events if e.node_id is not None])
        if not aggregate(domain, members=members) and events:
            announce_domain(domain)
        return sum(len(pks) for _, pks in writes.values())


def _stored_reports(domain: ComputeDomain, members: list[DomainMember]) -> dict[int, StatusReport]:
    reports = {}
    for member in members:
        if not member.active:
            continue
        # Only what the agent said since the desired state it must answer to: a report from
        # before the tray joined, or before the release, must not count (a stale "clean"
        # would let go of a tray whose agent never confirmed the release).
        since = max(member.assigned_at, domain.release_requested_at or member.assigned_at)
        report = _received_since(member.node.agent_report, since)
        if report is not None:
            reports[member.node_id] = report
    return reports


def _received_since(stored: dict[str, Any], since: datetime) -> StatusReport | None:
    """The report a tray stored (the agent's, with `received_at`), if received `since`."""
    if not stored or "step" not in stored:
        return None
    try:
        if datetime.fromisoformat(stored["received_at"]) < since:
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return cast(StatusReport, stored)


def _said(report: StatusReport) -> str:
    """What the agent said, as its tenant reads it: the first line of its error, else of
    its message. What follows (the daemon's log lines) is for operators, on the tray's page
    (`Node.agent_report`), never in a domain's status, timeline or notifications."""
    return headline(report.get("error") or report.get("message", ""))


def headline(text: str) -> str:
    """The first line of an agent's text, without its trailing punctuation."""
    return (text or "").strip().split("\n", 1)[0].strip()


def _marked_down(phase: str, tray_state: str) -> bool:
    """A running domain's member on a tray an operator marked down hears nothing from it
    until the tray is marked up: the operator's word wins over the agent's reports."""
    return tray_state == NodeState.DOWN and phase in RUNNING_PHASES


def _outcome(
    uid: str, phase: str, generation: int, report: StatusReport
) -> tuple[str, dict[str, Any]] | None:
    """(member state, fields) the report calls for; None when it is not about this domain
    or the domain is past listening. State RELEASED means: the tray is clean, let it go."""
    if report.get("domain_uid") not in (None, uid):
        return None  # still about a domain the tray served before
    step, applied = report["step"], report["generation_applied"]
    fields: dict[str, Any] = {
        "step": step[:64],
        "message": _said(report)[:2000],
        "daemon_state": report.get("daemon_state", "")[:32],
        "connections": {str(p["index"]): p["status"] for p in report.get("peers") or []},
        "generation_applied": applied,
    }
    if phase == Phase.RELEASING:
        clean = report.get("clean", False)
        return (MemberState.RELEASED if clean else MemberState.RELEASING), fields
    if phase in RUNNING_PHASES:
        state = STEP_STATE.get(step, MemberState.CONFIGURING)
        if state == MemberState.READY and applied < generation:
            state = MemberState.CONFIGURING  # ready, but for a desired state since replaced
        return state, fields
    return None


def _fold(
    domain: ComputeDomain, member: DomainMember, report: StatusReport, now: datetime
) -> tuple[str, dict[str, Any]] | None:
    """Apply the report to the member in memory: None when it changes nothing, else (the
    verb of the event its state change writes, "" when only its fields changed; the fields
    to write)."""
    if _marked_down(domain.phase, member.node.state):
        return None
    outcome = _outcome(str(domain.uid), domain.phase, domain.generation, report)
    if outcome is None:
        return None
    state, fields = outcome
    if state == MemberState.RELEASED:
        message = fields["message"] or "agent confirmed a clean tray"
        member.active, member.state, member.message = False, MemberState.RELEASED, message
        released = {"active": False, "state": state, "message": message}
        return "member.released", released | {"released_at": now, "state_changed_at": now}
    changed = state != member.state
    fields = {k: v for k, v in fields.items() if getattr(member, k) != v}
    if not changed and not fields:
        return None
    for name, value in fields.items():
        setattr(member, name, value)
    if not changed:
        return "", fields
    member.state = state
    fields |= {"state": state, "state_changed_at": now}
    if state in _STATE_STAMP:
        setattr(member, _STATE_STAMP[state], now)
        fields[_STATE_STAMP[state]] = now
    return f"member.{state}", fields


def _agent_back(domain: ComputeDomain, member: DomainMember) -> Any:
    """The member's agent reports again after a silence: its tenant hears the tray is back."""
    daemon = f" (IMEX daemon {member.daemon_state})" if member.daemon_state else ""
    return new_event(
        actor=Actor.for_agent(member.node),
        verb=TRAY_BACK_VERB,
        obj=domain,
        node=member.node,
        message=f"tray {member.node.hostname} is back: its agent reports again{daemon}",
        details={"nodes": [member.node.hostname], "index": member.index, "why": "agent_back"},
    )


def _member_event(domain: ComputeDomain, member: DomainMember, verb: str, message: str) -> Any:
    return new_event(
        actor=Actor.for_agent(member.node),
        verb=verb,
        obj=domain,
        node=member.node,
        message=f"{member.node.hostname} #{member.index}" + (f": {message}" if message else ""),
        details={"index": member.index, "state": member.state},
    )


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
    if domain.phase in RUNNING_PHASES:
        announce_failover_wanted(domain.pk)  # a placed domain's tray replaced, or its claims
