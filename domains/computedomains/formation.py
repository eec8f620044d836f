"""The controller's side of a domain's life: placement, formation, phase aggregation, the
end of a release and failure. Called by the services in `services.py` and by the tasks.

Concurrency, in short:
- Placements are serialized by one PostgreSQL advisory lock held for the (milliseconds
  long) transaction that reads the fabric and writes the members. Without it, concurrent
  placements would all compute the same best fit and collide on the one-live-domain-per-
  node constraint; with it, each sees what the previous one committed. The database
  constraints (one active membership per node, one channel per clique) stay the backstop.
- Phase changes are compare-and-set (`filter(phase=old).update(...)`), and every
  aggregation first locks its domain row, so two agents reporting "ready" at once cannot
  both miss the moment the last member became ready.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from domains.computedomains.events import (
    CONTROLLER,
    Actor,
    announce_desired_state,
    announce_domain,
    announce_nodes,
    record_event,
)
from domains.computedomains.models import (
    AllocationMode,
    ChannelAllocation,
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
    PlacementConstraint,
)
from domains.context import get_request_id, request_id_scope
from domains.errors import TransientError
from domains.placement import Placement, PlacementRequest, Rejection, place
from domains.placement.selectors import topology_snapshot

log = logging.getLogger(__name__)

PLACEMENT_LOCK_KEY = 7_301_955  # pg_advisory_xact_lock key: "one placement at a time"
PLACE_ATTEMPTS = 3
# Phases a domain can be failed from (Releasing finishes by release, never by failure).
FAILABLE_PHASES = (Phase.PENDING, Phase.ADMITTED, Phase.PLACING, Phase.FORMING)


def placement_request(domain: ComputeDomain) -> PlacementRequest:
    return PlacementRequest(
        num_nodes=domain.num_nodes,
        gpus_per_node=domain.gpus_per_node,
        constraint=domain.placement_constraint,
        target=domain.placement_target,
    )


# --- placement --------------------------------------------------------------------------------


def domain_place(*, domain_id: int) -> ComputeDomain | None:
    """Place one Admitted domain and start its formation, or leave it queued with reasons.

    Returns the domain (Forming, or still Admitted with reason `Unschedulable`), or None
    when it is no longer Admitted (placed, released or failed meanwhile): safe to call
    twice, from two workers, or for a domain that is gone.
    """
    for _ in range(PLACE_ATTEMPTS):
        try:
            return _place(domain_id)
        except IntegrityError:
            # Only without the advisory lock (SQLite) or against a concurrent direct write:
            # the constraint refused a double booking; read the fabric again.
            log.warning("placement of domain %s collided; retrying", domain_id)
    raise TransientError(f"placement of domain {domain_id} kept colliding")


def domains_place_queued() -> int:
    """Try every queued domain, first come first served; returns how many were placed.

    A later, smaller domain may take capacity an earlier, larger one cannot use yet
    (backfill): holding small requests behind a big one would strand trays. Once a
    request did not fit, unconstrained ones at least as large (trays and GPUs per tray)
    are skipped for this pass: they cannot fit either.
    """
    from domains.computedomains.selectors import queued_domains

    placed = 0
    rejected: list[tuple[int, int]] = []  # (trays, GPUs per tray) of requests that did not fit
    for domain_id, trays, gpus, constraint in queued_domains().values_list(
        "id", "num_nodes", "gpus_per_node", "placement_constraint"
    ):
        unconstrained = constraint == PlacementConstraint.ANY
        if unconstrained and any(trays >= t and gpus >= g for t, g in rejected):
            continue
        domain = domain_place(domain_id=domain_id)
        if domain is not None and domain.phase == Phase.FORMING:
            placed += 1
        elif domain is not None and unconstrained:
            rejected.append((trays, gpus))
    return placed


@transaction.atomic
def _place(domain_id: int) -> ComputeDomain | None:
    _lock_placement()
    domain = (
        ComputeDomain.objects.select_for_update(of=("self",))
        .select_related("namespace")
        .filter(pk=domain_id, phase=Phase.ADMITTED)
        .order_by()
        .first()
    )
    if domain is None:
        return None
    with domain_request_id(domain):
        result = place(placement_request(domain), topology_snapshot())
        if isinstance(result, Rejection):
            _mark_unschedulable(domain, result.reasons)
            return domain
        channels = _allocate_channels(domain, result)
        if channels is None:
            reason = f"no free IMEX channel left in clique {result.clique_name}"
            _mark_unschedulable(domain, (reason,))
            return domain
        _form(domain, result, channels)
        return domain


@contextlib.contextmanager
def domain_request_id(domain: ComputeDomain) -> Iterator[None]:
    """Events the controller writes for a domain carry the id of the request that asked
    for it, also when a beat pass (no request of its own) does the work."""
    if get_request_id() or not domain.request_id:
        yield
        return
    with request_id_scope(domain.request_id):
        yield


def _lock_placement() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PLACEMENT_LOCK_KEY])


def _allocate_channels(domain: ComputeDomain, placement: Placement) -> list[int] | None:
    """Single: the first free channel ≥ 1 of the clique (Slurm's pool rule). All: no rows."""
    if domain.allocation_mode == AllocationMode.ALL:
        return []
    taken = set(
        ChannelAllocation.objects.filter(
            clique_id=placement.clique_id, released_at__isnull=True
        ).values_list("channel", flat=True)
    )
    for channel in range(1, settings.PORTAL["IMEX_CHANNEL_COUNT"]):
        if channel not in taken:
            ChannelAllocation.objects.create(
                clique_id=placement.clique_id, channel=channel, domain=domain
            )
            return [channel]
    return None


def _form(domain: ComputeDomain, placement: Placement, channels: list[int]) -> None:
    """Members with indexes 0..n-1 in slot order, phase Forming, agents told to fetch."""
    DomainMember.objects.bulk_create(
        DomainMember(
            domain=domain,
            node_id=tray.node_id,
            index=index,
            clique_id=placement.clique_id,
            ip_address=tray.ip,
        )
        for index, tray in enumerate(placement.trays)
    )
    now = timezone.now()
    message = f"placed on {placement.describe()}; waiting for the agents to form IMEX"
    set_phase(
        domain,
        Phase.ADMITTED,
        Phase.FORMING,
        bump=True,
        placed_at=now,
        formation_deadline=now + settings.PORTAL["FORMATION_DEADLINE"],
        reason="Forming",
        message=message,
    )
    record_event(
        actor=CONTROLLER,
        verb="domain.placed",
        obj=domain,
        message=message,
        details={
            "clique": placement.clique_label,
            "rack": placement.rack,
            "nodes": placement.hostnames,
            "channels": channels if domain.allocation_mode == AllocationMode.SINGLE else "All",
            "generation": domain.generation,
        },
    )
    announce_domain(domain)
    announce_nodes(placement.node_ids)
    announce_desired_state(placement.node_ids)


def _mark_unschedulable(domain: ComputeDomain, reasons: Iterable[str]) -> None:
    """Stay queued with the reasons; an event only when the story changes (no spam)."""
    reasons = list(reasons)
    message = "; ".join(reasons)
    if domain.reason == "Unschedulable" and domain.message == message:
        return
    ComputeDomain.objects.filter(pk=domain.pk).update(
        reason="Unschedulable", message=message, updated_at=timezone.now()
    )
    domain.reason, domain.message = "Unschedulable", message
    record_event(
        actor=CONTROLLER,
        verb="domain.unschedulable",
        obj=domain,
        message=reasons[0] if reasons else "",
        details={"reasons": reasons},
    )
    announce_domain(domain)


# --- phase bookkeeping ------------------------------------------------------------------------


def set_phase(
    domain: ComputeDomain,
    old: str | Iterable[str],
    new: str,
    *,
    bump: bool = False,
    **fields: Any,
) -> bool:
    """Compare-and-set the phase; on success `domain` mirrors the row. False: lost the race."""
    olds = [old] if isinstance(old, str) else list(old)
    updates = {"phase": new, "updated_at": timezone.now(), **fields}
    if bump:
        updates["generation"] = F("generation") + 1
    if not ComputeDomain.objects.filter(pk=domain.pk, phase__in=olds).update(**updates):
        return False
    domain.refresh_from_db()
    return True


def lock_domain(domain_id: int) -> ComputeDomain | None:
    """The domain row locked for this transaction (serializes aggregation per domain)."""
    return (
        ComputeDomain.objects.select_for_update(of=("self",))
        .select_related("namespace")
        .filter(pk=domain_id)
        .order_by()
        .first()
    )


# What aggregation and its messages and events read of each member (it runs on every
# member's change, and whole rows with their trays cost more than the rest of a report).
_AGGREGATE_FIELDS = ("domain_id", "index", "active", "state", "message", "step", "node__hostname")


def aggregate(domain: ComputeDomain) -> None:
    """Fold the members' states into the domain's phase. Caller holds the domain row lock."""
    members = list(domain.members.select_related("node").only(*_AGGREGATE_FIELDS).order_by("index"))
    if domain.phase == Phase.RELEASING:
        if not any(m.active for m in members):
            finish_release(domain)
        return
    not_ready = [m for m in members if m.active and m.state != MemberState.READY]
    if domain.phase == Phase.FORMING:
        _aggregate_forming(domain, members, not_ready)
    elif domain.phase == Phase.READY and not_ready:
        message = _not_ready_message(not_ready)
        if set_phase(domain, Phase.READY, Phase.DEGRADED, reason="MemberNotReady", message=message):
            _phase_event(domain, "domain.degraded", message, not_ready)
    elif domain.phase == Phase.DEGRADED:
        if not not_ready:
            message = f"recovered: all {len(members)} members ready"
            if set_phase(domain, Phase.DEGRADED, Phase.READY, reason="", message=message):
                _phase_event(domain, "domain.recovered", message, [])
        else:
            _update_message(domain, "MemberNotReady", _not_ready_message(not_ready))


def _aggregate_forming(
    domain: ComputeDomain, members: list[DomainMember], not_ready: list[DomainMember]
) -> None:
    if members and not not_ready:
        now = timezone.now()
        message = f"all {len(members)} members ready"
        expires = now + domain.lifetime if domain.lifetime else None
        if set_phase(
            domain,
            Phase.FORMING,
            Phase.READY,
            reason="",
            message=message,
            ready_at=now,
            lease_expires_at=expires,
        ):
            _phase_event(domain, "domain.ready", message, [])
        return
    failed = [m for m in not_ready if m.state == MemberState.FAILED]
    if failed:
        _update_message(domain, "MemberFailed", _not_ready_message(failed))
    else:
        ready = len(members) - len(not_ready)
        _update_message(domain, "Forming", f"{ready} of {len(members)} members ready")


def _not_ready_message(members: list[DomainMember]) -> str:
    """'gb-r01-t03 failed: peer 2 refused (step waiting_peers)' for the first few."""
    parts = []
    for m in members[:3]:
        text = f"{m.node.hostname} {MemberState(m.state).label.lower()}"
        if m.message:
            text += f": {m.message}"
        if m.step:
            text += f" (step {m.step})"
        parts.append(text)
    more = f" and {len(members) - 3} more" if len(members) > 3 else ""
    return "; ".join(parts) + more


def _update_message(domain: ComputeDomain, reason: str, message: str) -> None:
    if domain.reason == reason and domain.message == message:
        return
    ComputeDomain.objects.filter(pk=domain.pk).update(
        reason=reason, message=message, updated_at=timezone.now()
    )
    domain.reason, domain.message = reason, message
    announce_domain(domain)


def _phase_event(
    domain: ComputeDomain, verb: str, message: str, members: list[DomainMember]
) -> None:
    record_event(
        actor=CONTROLLER,
        verb=verb,
        obj=domain,
        message=message,
        details={"phase": domain.phase, "nodes": [m.node.hostname for m in members]},
    )
    announce_domain(domain)


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
    if not set_phase(
        domain,
        Phase.RELEASING,
        Phase.RELEASED,
        released_at=now,
        reason="Released",
        message="every tray is clean or declared down; trays and channels are back in the pool",
    ):
        return False
    ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True).update(
        released_at=now
    )
    node_ids = list(domain.members.values_list("node_id", flat=True))
    record_event(actor=CONTROLLER, verb="domain.released", obj=domain, message=domain.message)
    announce_domain(domain)
    announce_nodes(node_ids)
    enqueue_queued_placement()
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
    nothing running that a next domain's config would not replace).
    """
    with transaction.atomic():
        domain = lock_domain(domain_id)
        if domain is None:
            return None
        with domain_request_id(domain):
            return _fail(domain, reason, message, actor, details or {})


def _fail(
    domain: ComputeDomain, reason: str, message: str, actor: Actor, details: dict[str, Any]
) -> ComputeDomain | None:
    now = timezone.now()
    if not set_phase(
        domain,
        FAILABLE_PHASES,
        Phase.FAILED,
        bump=True,
        failed_at=now,
        reason=reason,
        message=message,
    ):
        return None
    node_ids = list(domain.members.filter(active=True).values_list("node_id", flat=True))
    domain.members.filter(active=True).update(active=False, released_at=now)
    domain.members.exclude(state=MemberState.READY).update(state=MemberState.FAILED)
    ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True).update(
        released_at=now
    )
    record_event(actor=actor, verb="domain.failed", obj=domain, message=message, details=details)
    announce_domain(domain)
    announce_nodes(node_ids)
    announce_desired_state(node_ids)
    if node_ids:
        enqueue_queued_placement()
    return domain


def enqueue_queued_placement() -> None:
    """After commit, retry the queue: capacity or a channel just came free."""
    from domains.computedomains import tasks

    tasks.place_queued.delay_on_commit()
