"""The queue's future, read from the database and simulated by `domains.placement.forecast`.

`queue_forecast()` answers, for every domain waiting for capacity (Admitted) or for an
admin (Pending, as if approved now), when it would be placed; `spec_forecast()` answers it
for a request not made yet (the dry run). Each reads the fabric and the queue in a constant
number of queries (the topology snapshot's three, the holdings and the queue), then runs
the pure simulation with the same `plan()` the controller uses.

What a domain holds and until when: Ready or Degraded, its lease end; Forming, placement
plus the formation deadline plus its lifetime; Releasing, now; no lifetime, never.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from domains.computedomains.admission import CleanSpec
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.models import (
    ComputeDomain,
    DomainMember,
    Phase,
    PlacementConstraint,
)
from domains.placement.forecast import Forecast, Holding, Waiting, forecast
from domains.placement.model import PlacementRequest, Topology

NEW_REQUEST = 0  # the key of a request not made yet (domain ids start at 1)


def queue_forecast(*, now: datetime | None = None) -> dict[int, Forecast]:
    """Domain id → its forecast, for every Admitted and every Pending domain."""
    now = now or timezone.now()
    queue = _queue()
    if not queue:  # nothing waits (the rule after every placement): no fabric to read
        return {}
    answers = forecast(topology_snapshot(now=now), _holdings(now), queue, now=now.timestamp())
    return {abs(key): answer for key, answer in answers.items()}


def spec_forecast(
    clean: CleanSpec, *, needs_approval: bool, now: datetime | None = None
) -> Forecast:
    """When a request for `clean` made now would be placed: behind every domain queued now
    (and behind those waiting for approval, when it needs one too)."""
    now = now or timezone.now()
    topology, holdings, queue = _inputs(now)
    new = Waiting(
        key=NEW_REQUEST,
        request=PlacementRequest(
            num_nodes=clean.num_nodes,
            gpus_per_node=clean.gpus_per_node,
            constraint=clean.placement_constraint,
            target=clean.placement_target,
            cliques=clean.span_cliques,
            racks=clean.span_racks,
        ),
        hold=_hold(clean.lifetime),
        constrained=clean.placement_constraint != PlacementConstraint.ANY,
    )
    admitted = [w for w in queue if not w.key < 0]
    pending = [w for w in queue if w.key < 0]
    ordered = [*admitted, *pending, new] if needs_approval else [*admitted, new, *pending]
    return forecast(topology, holdings, ordered, now=now.timestamp())[NEW_REQUEST]


def _inputs(now: datetime) -> tuple[Topology, list[Holding], list[Waiting]]:
    return topology_snapshot(now=now), _holdings(now), _queue()


def _holdings(now: datetime) -> list[Holding]:
    """The trays each live domain holds and when it lets go of them (one query)."""
    deadline: timedelta = settings.PORTAL["FORMATION_DEADLINE"]
    trays: dict[int, list[int]] = defaultdict(list)
    until: dict[int, float] = {}
    rows = DomainMember.objects.filter(active=True).values_list(
        "domain_id", "node_id", "domain__phase", "domain__lease_expires_at",
        "domain__lifetime", "domain__placed_at",
    )  # fmt: skip
    for domain_id, node_id, phase, lease, lifetime, placed in rows:
        trays[domain_id].append(node_id)
        if domain_id in until:
            continue
        if phase == Phase.RELEASING:
            until[domain_id] = now.timestamp()
        elif lease is not None:
            until[domain_id] = lease.timestamp()
        elif lifetime is not None:
            until[domain_id] = ((placed or now) + deadline + lifetime).timestamp()
        else:
            until[domain_id] = math.inf
    return [Holding(tuple(trays[d]), until[d]) for d in trays]


def _queue() -> list[Waiting]:
    """Admitted domains first come first served (their keys are their ids), then those
    waiting for approval by age (keys are minus their ids, to tell them apart)."""
    rows = (
        ComputeDomain.objects.filter(phase__in=(Phase.ADMITTED, Phase.PENDING))
        .exclude(num_nodes=0)  # follows its workload: waits for pods, never for placement
        .order_by("admitted_at", "created_at", "id")
        .values_list(
            "id", "phase", "num_nodes", "gpus_per_node", "placement_constraint",
            "placement_target", "lifetime", "span_cliques", "span_racks",
        )
    )  # fmt: skip
    admitted: list[Waiting] = []
    pending: list[Waiting] = []
    for pk, phase, nodes, gpus, constraint, target, lifetime, cliques, racks in rows:
        waiting = Waiting(
            key=pk if phase == Phase.ADMITTED else -pk,
            request=PlacementRequest(nodes, gpus, constraint, target, cliques=cliques, racks=racks),
            hold=_hold(lifetime),
            constrained=constraint != PlacementConstraint.ANY,
        )
        (admitted if phase == Phase.ADMITTED else pending).append(waiting)
    return [*admitted, *pending]


def _hold(lifetime: timedelta | None) -> float:
    """Seconds a placed domain holds its trays: formation, then its lease (see lease_end)."""
    if lifetime is None:
        return math.inf
    deadline: timedelta = settings.PORTAL["FORMATION_DEADLINE"]
    return (deadline + lifetime).total_seconds()
