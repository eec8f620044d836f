"""A domain's phase: `transition`, the one way it changes (compare-and-set, its event, its
tally, its announcement), the domain lock, the members' states folded into the phase, and
the two ends (Released, Failed).

Concurrency, in short: every phase change is compare-and-set
(`filter(phase=old).update(...)`), and every aggregation first locks its domain row, so two
agents reporting "ready" at once cannot both miss the moment the last member became ready.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from domains.audit.events import CONTROLLER, Actor, record_event
from domains.computedomains import ensembles, tallies
from domains.computedomains.models import (
    TERMINAL_PHASES,
    ChannelAllocation,
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
)
from domains.context import get_request_id, request_id_scope
from domains.inventory.models import Node
from domains.signals import (
    announce_capacity_freed,
    announce_desired_state,
    announce_domain,
    announce_nodes,
)

# An event's details, or a function of the domain that gives them once it changed.
Details = dict[str, Any] | Callable[[ComputeDomain], dict[str, Any]] | None

# A domain that follows its workload and holds no tray (yet, or any more): Admitted, with
# this reason and message (the UI says "waiting for workload").
WAITING_FOR_WORKLOAD = "WaitingForWorkload"
WAITING_MESSAGE = (
    "waiting for workload: nothing is reserved; trays join as the pods holding its "
    "ResourceClaims are prepared on them"
)

# A running domain with a member whose agent is silent (and no other trouble).
AGENT_SILENT = "AgentSilent"
# A placed domain that lost a tray and waits for a free one of its clique to replace it.
WAITING_FOR_TRAY = "WaitingForTray"

# Phases a domain can be failed from (Releasing finishes by release, never by failure).
FAILABLE_PHASES = (Phase.PENDING, Phase.ADMITTED, Phase.FORMING)


def transition(
    domain: ComputeDomain,
    old: str | Iterable[str],
    new: str,
    *,
    verb: str | None,
    actor: Actor = CONTROLLER,
    says: str = "",
    details: Details = None,
    node: Node | None = None,
    members: list[DomainMember] | None = None,
    bump: bool = False,
    **fields: Any,
) -> bool:
    """The one way a domain's phase changes: compare-and-set from `old` to `new` (with
    `fields`; `bump`: a new generation, so the agents fetch again), then, if it won, its
    event (`verb` by `actor`, saying `says`, about `node`), its tally and its announcement.
    False: another worker changed the phase first, and nothing was written.

    `details` may be a function of the domain, for what only the change tells (the bumped
    generation). `verb` None: the change's events are its members', which the caller
    records. `members`: the members as the caller holds them, for the formation's figures.
    """
    if not _compare_and_set(domain, old, new, bump=bump, **fields):
        return False
    if verb is not None:
        record_event(
            actor=actor,
            verb=verb,
            obj=domain,
            node=node,
            message=says,
            details=details(domain) if callable(details) else details,
        )
    _tally(domain, verb, members)
    announce_domain(domain)
    return True


def _compare_and_set(
    domain: ComputeDomain, old: str | Iterable[str], new: str, *, bump: bool, **fields: Any
) -> bool:
    """Compare-and-set the phase; on success `domain` mirrors the row. False: lost the race."""
    olds = [old] if isinstance(old, str) else list(old)
    updates = {"phase": new, "updated_at": timezone.now(), **fields}
    if bump:
        updates["generation"] = F("generation") + 1
    if not ComputeDomain.objects.filter(pk=domain.pk, phase__in=olds).update(**updates):
        return False
    # Mirror what was written rather than re-read the row (and, with it, lose the cached
    # namespace every event of the domain then reads again): only the bumped generation
    # is the database's to tell.
    for name, value in updates.items():
        if name != "generation":
            setattr(domain, name, value)
    if bump:
        domain.refresh_from_db(fields=["generation"])
    return True


def _tally(domain: ComputeDomain, verb: str | None, members: list[DomainMember] | None) -> None:
    """The figures (tallies.py) a transition adds to, by the event that names it."""
    if verb == "domain.approved":
        tally_admitted(domain)
    elif verb == "domain.placed":
        seconds = tallies.seconds_between(domain.admitted_at, domain.placed_at)
        tallies.observe(tallies.FORMATION_STEP, [seconds], label="placed")
    elif verb == "domain.ready":
        _tally_formation(domain, members or [])
    elif verb == "domain.released":
        seconds = tallies.seconds_between(domain.release_requested_at, domain.released_at)
        tallies.observe(tallies.RELEASE, [seconds])
    if domain.phase in TERMINAL_PHASES:
        tallies.count(tallies.ENDED, label=f"{domain.namespace_id}:{domain.phase}")
        if domain.phase == Phase.FAILED and domain.reason != "Denied":  # not a failure
            tallies.count(tallies.FAILED, label=str(domain.namespace_id))


def tally_admitted(domain: ComputeDomain) -> None:
    """Request → Admitted, once: when an admin approves, or at once for a request below
    the approval threshold (which is created Admitted)."""
    seconds = tallies.seconds_between(domain.created_at, domain.admitted_at)
    tallies.observe(tallies.FORMATION_STEP, [seconds], label="admitted")


def lock_domain(domain_id: int) -> ComputeDomain | None:
    """The domain row locked for this transaction (serializes aggregation per domain)."""
    return (
        ComputeDomain.objects.select_for_update(of=("self",))
        .select_related("namespace")
        .filter(pk=domain_id)
        .order_by()
        .first()
    )


@contextlib.contextmanager
def request_id_from(domain: ComputeDomain) -> Iterator[None]:
    """Events written inside carry the id of the request that asked for the domain, also
    when a beat pass (no request of its own) does the work."""
    if get_request_id() or not domain.request_id:
        yield
        return
    with request_id_scope(domain.request_id):
        yield


def set_reason(
    domain: ComputeDomain,
    reason: str,
    message: str,
    *,
    phase: str | None = None,
    verb: str | None = None,
    says: str | None = None,
    details: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> bool:
    """The one way a domain's reason and message change without its phase: written when
    they say something new (with `phase`, only while the domain is still in it), then,
    like `transition`, the controller's event (`verb`, saying `says`, by default the
    message) and the announcement. False: nothing was written."""
    if domain.reason == reason and domain.message == message:
        return False
    rows = ComputeDomain.objects.filter(pk=domain.pk)
    if phase is not None:
        rows = rows.filter(phase=phase)
    if not rows.update(reason=reason, message=message, updated_at=now or timezone.now()):
        return False
    domain.reason, domain.message = reason, message
    if verb is not None:
        said = message if says is None else says
        record_event(actor=CONTROLLER, verb=verb, obj=domain, message=said, details=details)
    announce_domain(domain)
    return True


# --- the members' states folded into the phase -----------------------------------------------

# What aggregation and its messages and events read of each member (it runs on every
# member's change, and whole rows with their trays cost more than the rest of a report).
_AGGREGATE_FIELDS = (
    "domain_id", "index", "clique_id", "active", "state", "message", "step", "ready_at",
    "node__hostname",
)  # fmt: skip


def aggregate(domain: ComputeDomain, *, members: list[DomainMember] | None = None) -> bool:
    """Fold the members' states into the domain's phase. Caller holds the domain row lock.

    `members`: every member of the domain in index order as the caller holds them (with
    `_AGGREGATE_FIELDS` and the tray's hostname), when it has just read and changed them.
    True when the domain's status changed (and was announced).
    """
    if members is None:
        members = list(
            domain.members.select_related("node").only(*_AGGREGATE_FIELDS).order_by("index")
        )
    if domain.phase == Phase.RELEASING:
        return not any(m.active for m in members) and finish_release(domain)
    not_ready = [m for m in members if m.active and m.state != MemberState.READY]
    if domain.phase == Phase.FORMING:
        return _aggregate_forming(domain, members, not_ready)
    if domain.phase == Phase.READY and not_ready:
        message = _not_ready_message(not_ready, members)
        return _phase_change(
            domain,
            Phase.READY,
            Phase.DEGRADED,
            "domain.degraded",
            message,
            not_ready,
            reason=not_ready_reason(not_ready),
        )
    elif domain.phase == Phase.DEGRADED:
        return _aggregate_degraded(domain, members, not_ready)
    return False


def _aggregate_forming(
    domain: ComputeDomain, members: list[DomainMember], not_ready: list[DomainMember]
) -> bool:
    if members and not not_ready:
        now = timezone.now()
        message = f"all {sum(m.active for m in members)} members ready"
        if (cliques := ensembles.spanned(members)) > 1:
            message += f", in {cliques} cliques"
        expires = now + domain.lifetime if domain.lifetime else None
        return transition(
            domain,
            Phase.FORMING,
            Phase.READY,
            verb="domain.ready",
            says=message,
            details={"phase": Phase.READY, "nodes": []},
            members=members,
            reason="",
            message=message,
            ready_at=now,
            lease_expires_at=expires,
        )
    failed = [m for m in not_ready if m.state == MemberState.FAILED]
    if failed:
        return set_reason(domain, "MemberFailed", _not_ready_message(failed, members))
    active = sum(m.active for m in members)
    message = f"{active - len(not_ready)} of {active} members ready"
    if where := ensembles.where_not_ready(not_ready, members):  # over several cliques
        message += f"; waiting for {where}"
    return set_reason(domain, "Forming", message)


def _tally_formation(domain: ComputeDomain, members: list[DomainMember]) -> None:
    """The formation's figures, once, as it turns Ready: placed → Ready (formation: what the
    trays and the portal took; the wait for an admin's approval is `admitted`, apart), each
    tray's placed → ready, the last tray's ready → Ready (the portal's own share)."""
    trays = [m.ready_at for m in members if m.active and m.ready_at is not None]
    formation = tallies.seconds_between(domain.placed_at, domain.ready_at)
    tallies.observe(tallies.FORMATION, [formation])
    tallies.observe(
        tallies.FORMATION_STEP,
        [tallies.seconds_between(domain.placed_at, at) for at in trays],
        label="tray_ready",
    )
    if trays:
        last = tallies.seconds_between(max(trays), domain.ready_at)
        tallies.observe(tallies.FORMATION_STEP, [last], label="ready")


def _aggregate_degraded(
    domain: ComputeDomain, members: list[DomainMember], not_ready: list[DomainMember]
) -> bool:
    if not_ready:
        if domain.reason == WAITING_FOR_TRAY:  # the failover pass says what it waits for
            return False
        message = _not_ready_message(not_ready, members)
        return set_reason(domain, not_ready_reason(not_ready), message)
    message = f"recovered: all {sum(m.active for m in members)} members ready"
    return _phase_change(domain, Phase.DEGRADED, Phase.READY, "domain.recovered", message, [])


def not_ready_reason(members: list[DomainMember]) -> str:
    """`AgentSilent` when every member not ready is one whose agent stopped reporting (what
    its daemon does is not known: the workload may run on), else `MemberNotReady`."""
    if members and all(m.state == MemberState.SILENT for m in members):
        return AGENT_SILENT
    return "MemberNotReady"


def _not_ready_message(members: list[DomainMember], everyone: list[DomainMember]) -> str:
    """'gb-r01-t03 failed: peer 2 refused (step waiting_peers)' for the first few; in a
    domain over several cliques, after the clique they are in ('clique r002-c0 (rack
    r002): …; the other clique is up')."""
    parts = []
    for m in members[:3]:
        text = f"{m.node.hostname} {MemberState(m.state).label.lower()}"
        if m.state == MemberState.SILENT:
            text = m.node.hostname
        if m.message:
            text += f": {m.message}"
        if m.step and m.state != MemberState.SILENT:
            text += f" (step {m.step})"
        parts.append(text)
    more = f" and {len(members) - 3} more" if len(members) > 3 else ""
    where = ensembles.where_not_ready(members, everyone)
    said = "; ".join(parts) + more
    return f"{where}: {said}{ensembles.others_up(members, everyone)}" if where else said


def _phase_change(
    domain: ComputeDomain,
    old: str,
    new: str,
    verb: str,
    message: str,
    members: list[DomainMember],
    *,
    reason: str = "",
) -> bool:
    """A change the members' states called for, naming the trays that did."""
    return transition(
        domain,
        old,
        new,
        verb=verb,
        says=message,
        details={"phase": new, "nodes": [m.node.hostname for m in members]},
        reason=reason,
        message=message,
    )


# --- the end of a domain ----------------------------------------------------------------------


def release_member(member: DomainMember, *, message: str, now: datetime | None = None) -> None:
    """The tray no longer serves the domain (agent confirmed clean, or node declared down)."""
    now = now or timezone.now()
    DomainMember.objects.filter(pk=member.pk).update(
        active=False,
        state=MemberState.RELEASED,
        released_at=now,
        state_changed_at=now,
        message=message[:2000],
    )
    member.active, member.state = False, MemberState.RELEASED


def finish_release(domain: ComputeDomain) -> bool:
    """Releasing → Released once no member holds a tray; then channels and trays are free."""
    if domain.members.filter(active=True).exists():
        return False
    now = timezone.now()
    message = "every tray is clean or declared down; trays and channels are back in the pool"
    if not transition(
        domain,
        Phase.RELEASING,
        Phase.RELEASED,
        verb="domain.released",
        says=message,
        released_at=now,
        reason="Released",
        message=message,
    ):
        return False
    ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True).update(
        released_at=now
    )
    announce_nodes(domain.members.values_list("node_id", flat=True))
    announce_capacity_freed()
    return True


def domain_fail(
    *,
    domain_id: int,
    reason: str,
    message: str,
    actor: Actor = CONTROLLER,
    details: dict[str, Any] | None = None,
) -> ComputeDomain | None:
    """End a domain that cannot form as Failed and free everything it held at once.

    Trays go back to the pool right away: their desired state becomes "none", so the
    agents tear down whatever they started (level-triggered; an agent that is gone has
    nothing running that a next domain's config would not replace). None when the domain
    is gone or past failing (Ready, Releasing, ended).
    """
    with transaction.atomic():
        domain = lock_domain(domain_id)
        if domain is None:
            return None
        with request_id_from(domain):
            return _fail(domain, reason, message, actor, details or {})


def _fail(
    domain: ComputeDomain, reason: str, message: str, actor: Actor, details: dict[str, Any]
) -> ComputeDomain | None:
    now = timezone.now()
    node_ids = list(domain.members.filter(active=True).values_list("node_id", flat=True))
    if not transition(
        domain,
        FAILABLE_PHASES,
        Phase.FAILED,
        verb="domain.failed",
        actor=actor,
        says=message,
        details=details,
        bump=True,
        failed_at=now,
        reason=reason,
        message=message,
    ):
        return None
    domain.members.filter(active=True).update(active=False, released_at=now)
    domain.members.exclude(state=MemberState.READY).update(state=MemberState.FAILED)
    ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True).update(
        released_at=now
    )
    announce_nodes(node_ids)
    announce_desired_state(node_ids)
    if node_ids:
        announce_capacity_freed()
    return domain
