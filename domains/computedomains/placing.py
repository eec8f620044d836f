"""Placing an Admitted domain: choose its trays, take its channel, start its formation.

Placements are serialized by one PostgreSQL advisory lock held for the (milliseconds long)
transaction that reads the fabric and writes the members. Without it, concurrent
placements would all compute the same best fit and collide on the one-live-domain-per-node
constraint; with it, each sees what the previous one committed. The database constraints
(one active membership per node, one channel per clique) stay the backstop.

A burst of requests (eight tenants at once) is placed in one such transaction: the task
queued for each request places its domain and every other domain admitted and not yet
tried, oldest first, with the lock taken once and the fabric read once (each placement takes
its trays from it in memory). One at a time, the eighth of eight domains waited for seven
transactions of ~14 queries and a fabric read each, on a worker sharing its CPU with the
seven domains already forming; the later tasks find their domains placed and stop.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from domains.computedomains.admission import lease_end
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.models import (
    AllocationMode,
    ChannelAllocation,
    ComputeDomain,
    DomainMember,
    Phase,
    PlacementConstraint,
)
from domains.computedomains.phases import request_id_from, set_reason, transition
from domains.computedomains.selectors import queued_domains
from domains.errors import TransientError
from domains.placement.model import Placement, PlacementRequest, Rejection, SpanningPlacement
from domains.placement.simulation import Fabric
from domains.placement.spanning import plan
from domains.signals import announce_desired_state, announce_nodes

log = logging.getLogger(__name__)

PLACEMENT_LOCK_KEY = 7_301_955  # pg_advisory_xact_lock key: "one placement at a time"
PLACE_ATTEMPTS = 3
BURST_MAX = 32  # domains placed in one transaction at most (a longer burst: the next task)


def placement_request(domain: ComputeDomain, *, at: datetime | None = None) -> PlacementRequest:
    """What placement needs to know of a domain's spec, placed `at` (default: now) and held
    for its lifetime (trays with maintenance in that time are not taken)."""
    at = at or timezone.now()
    return PlacementRequest(
        num_nodes=domain.num_nodes,
        gpus_per_node=domain.gpus_per_node,
        constraint=domain.placement_constraint,
        target=domain.placement_target,
        at=at.timestamp(),
        until=lease_end(at, domain.lifetime),
        cliques=domain.span_cliques,
        racks=domain.span_racks,
    )


def domain_place(*, domain_id: int) -> ComputeDomain | None:
    """Place one Admitted domain and start its formation, or leave it queued with reasons.

    Returns the domain (Forming, or still Admitted with reason `Unschedulable`), or None
    when it is no longer Admitted (placed, released or failed meanwhile): safe to call
    twice, from two workers, or for a domain that is gone.
    """
    handled = _placing(domain_id, burst=False)
    return handled[0] if handled else None


def domains_place_burst(*, domain_id: int) -> list[ComputeDomain]:
    """Place this domain and every other one admitted and not yet tried (reason `Queued`),
    oldest first, up to BURST_MAX, in one transaction; returns the domains handled (each
    Forming, or still Admitted with reason `Unschedulable`). Queued for every request, it
    also runs when its own domain was already placed by an earlier burst: each run takes
    the oldest untried ones, so the tasks of a burst of any length place all of it.
    """
    return _placing(domain_id, burst=True)


def _placing(domain_id: int, *, burst: bool) -> list[ComputeDomain]:
    for _ in range(PLACE_ATTEMPTS):
        try:
            return _place(domain_id, burst=burst)
        except IntegrityError:
            # Only against a write that bypassed the placement lock: the constraint refused
            # a double booking; read the fabric again.
            log.warning("placement of domain %s collided; retrying", domain_id)
    raise TransientError(f"placement of domain {domain_id} kept colliding")


def domains_place_queued() -> int:
    """Try every queued domain, first come first served; returns how many were placed.

    A later, smaller domain may take capacity an earlier, larger one cannot use yet
    (backfill): holding small requests behind a big one would strand trays. Once a
    request did not fit, unconstrained ones at least as large (trays and GPUs per tray)
    are skipped for this pass: they cannot fit either.
    """
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
def _place(domain_id: int, *, burst: bool) -> list[ComputeDomain]:
    lock_placement()
    wanted = Q(pk=domain_id)
    if burst:
        wanted |= Q(reason="Queued", num_nodes__gt=0)
    domains = list(
        ComputeDomain.objects.select_for_update(of=("self",))
        .select_related("namespace")
        .filter(wanted, phase=Phase.ADMITTED)
        .order_by("admitted_at", "id")[:BURST_MAX]
    )
    if not domains:
        return []
    fabric = Fabric(topology_snapshot())
    for domain in domains:
        with request_id_from(domain):
            result = plan(placement_request(domain), fabric.topology)
            if isinstance(result, Rejection):
                _mark_unschedulable(domain, result.reasons)
                continue
            parts = result.parts if isinstance(result, SpanningPlacement) else (result,)
            channels, short = _allocate_channels(domain, parts)
            if short:
                _mark_unschedulable(domain, (f"no free IMEX channel left in clique {short}",))
                continue
            _form(domain, result, parts, channels)
            for part in parts:
                fabric.take(part)
    return domains


def lock_placement() -> None:
    """Serialize with every other placement (and failover) until the transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PLACEMENT_LOCK_KEY])


def _allocate_channels(
    domain: ComputeDomain, parts: Sequence[Placement]
) -> tuple[dict[int, list[int]], str]:
    """Per clique of the domain, its channels: `Single`, the first free channel ≥ 1 of that
    clique's ledger (Slurm's pool rule; each clique's IMEX ensemble has its own number);
    `All`, no rows. Returns ({clique id: channels}, "") or ({}, the name of a clique with
    no channel left), writing nothing then."""
    if domain.allocation_mode == AllocationMode.ALL:
        return {part.clique_id: [] for part in parts}, ""
    taken: dict[int, set[int]] = defaultdict(set)
    for clique_id, channel in ChannelAllocation.objects.filter(
        clique_id__in=[part.clique_id for part in parts], released_at__isnull=True
    ).values_list("clique_id", "channel"):
        taken[clique_id].add(channel)
    chosen: dict[int, list[int]] = {}
    numbers = range(1, settings.PORTAL["IMEX_CHANNEL_COUNT"])
    for part in parts:
        first = next((c for c in numbers if c not in taken[part.clique_id]), None)
        if first is None:
            return {}, part.clique_name
        chosen[part.clique_id] = [first]
    ChannelAllocation.objects.bulk_create(
        ChannelAllocation(clique_id=clique_id, channel=number, domain=domain)
        for clique_id, (number,) in chosen.items()
    )
    return chosen, ""


def _form(
    domain: ComputeDomain,
    placement: Placement | SpanningPlacement,
    parts: Sequence[Placement],
    channels: dict[int, list[int]],
) -> None:
    """Members with indexes 0..k-1 in slot order in each clique (one IMEX ensemble per
    clique), phase Forming, agents told to fetch."""
    DomainMember.objects.bulk_create(
        DomainMember(
            domain=domain,
            node_id=tray.node_id,
            index=index,
            clique_id=part.clique_id,
            ip_address=tray.ip,
        )
        for part in parts
        for index, tray in enumerate(part.trays)
    )
    now = timezone.now()
    message = f"placed on {placement.describe()}; waiting for the agents to form IMEX"
    transition(
        domain,
        Phase.ADMITTED,
        Phase.FORMING,
        verb="domain.placed",
        says=message,
        details=lambda domain: {
            **_where(parts, channels, domain.allocation_mode),
            "nodes": placement.hostnames,
            "generation": domain.generation,
        },
        bump=True,
        placed_at=now,
        formation_deadline=now + settings.PORTAL["FORMATION_DEADLINE"],
        reason="Forming",
        message=message,
    )
    announce_nodes(placement.node_ids)
    announce_desired_state(placement.node_ids)


def _where(
    parts: Sequence[Placement], channels: dict[int, list[int]], mode: str
) -> dict[str, object]:
    """The placed event's clique, rack and channels; one entry per clique when it spans."""

    def held(part: Placement) -> list[int] | str:
        return channels[part.clique_id] if mode == AllocationMode.SINGLE else "All"

    if len(parts) == 1:
        (part,) = parts
        return {"clique": part.clique_label, "rack": part.rack, "channels": held(part)}
    return {
        "cliques": [
            {"clique": p.clique_label, "rack": p.rack, "trays": len(p.trays), "channels": held(p)}
            for p in parts
        ],
        "racks": list(dict.fromkeys(p.rack for p in parts)),
    }


def _mark_unschedulable(domain: ComputeDomain, reasons: Iterable[str]) -> None:
    """Stay queued with the reasons; an event only when the story changes (no spam)."""
    reasons = list(reasons)
    set_reason(
        domain,
        "Unschedulable",
        "; ".join(reasons),
        verb="domain.unschedulable",
        says=reasons[0] if reasons else "",
        details={"reasons": reasons},
    )
