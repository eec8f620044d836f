"""When would each queued request be placed? The queue simulated forward with `plan()`.

Given the fabric now, the trays held by live domains with the time each lets go (its lease
end), and the queue in the order the controller serves it, `forecast` replays what the
controller would do: at each moment trays come free (a lease ends, a maintenance window is
over) it runs one queue pass exactly as `domains_place_queued` does (first come, first
served; a later, smaller request may take trays an earlier, larger one cannot use yet; once
an unconstrained request did not fit, larger unconstrained ones are skipped for that pass),
with the same `plan()` that places domains for real (one clique, or several for a domain
larger than a clique or asking to span some). A request placed in the simulation
holds its trays for its own lease, so those behind it wait for that too.

It assumes no new request arrives, nobody releases early, leases are not extended and
trays that are cordoned, down or silent stay out. When no moment makes a request fit, the
answer says why instead of guessing: the request can never fit the fabric as it is, or
nothing it waits for ever ends (trays held without a lease end).

Times are seconds since the epoch (placement's clock; `math.inf`: never).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from domains.placement.model import (
    Placement,
    PlacementRequest,
    Rejection,
    SpanningPlacement,
    Topology,
    TrayStatus,
)
from domains.placement.spanning import plan

Placed = Placement | SpanningPlacement
Policy = Callable[[PlacementRequest, Topology], Placed | Rejection]

NEVER_FITS = "NeverFits"  # not even with every lease ended
NO_LEASE_ENDS = "NoLeaseEnds"  # it needs trays held by domains that never let go
ESTIMATED = "Estimated"
NOW = "FitsNow"


@dataclass(frozen=True)
class Holding:
    """Trays a live domain holds now, let go at `until` (inf: no lease end)."""

    node_ids: tuple[int, ...]
    until: float


@dataclass(frozen=True)
class Waiting:
    """A queued request, in the order the controller serves the queue."""

    key: int
    request: PlacementRequest  # without `at`/`until`: the forecast sets them
    hold: float  # seconds it holds its trays once placed (inf: no lease end)
    constrained: bool = False  # a clique or rack constraint (never skipped after a miss)


@dataclass(frozen=True)
class Forecast:
    """When the request would be placed (None: no estimate) and why, in words."""

    at: float | None
    reason: str  # FitsNow | Estimated | NeverFits | NoLeaseEnds
    message: str = ""


class SimulatedFabric:
    """Tray statuses that change as the simulated clock runs. Only the cliques a change
    touches are rebuilt, so reading the topology after each step costs O(cliques)."""

    def __init__(self, topology: Topology) -> None:
        self.cliques = list(topology.cliques)
        self._where = {t.node_id: i for i, c in enumerate(self.cliques) for t in c.trays}

    def topology(self) -> Topology:
        return Topology(tuple(self.cliques))

    def set(self, node_ids: Sequence[int], status: str) -> None:
        by_clique: dict[int, set[int]] = {}
        for node_id in node_ids:
            if node_id in self._where:
                by_clique.setdefault(self._where[node_id], set()).add(node_id)
        for i, ids in by_clique.items():
            clique = self.cliques[i]
            self.cliques[i] = replace(
                clique,
                trays=tuple(
                    replace(t, status=status) if t.node_id in ids and t.status != status else t
                    for t in clique.trays
                ),
            )


def forecast(
    topology: Topology,
    holdings: Sequence[Holding],
    queue: Sequence[Waiting],
    *,
    now: float,
    policy: Policy = plan,
    max_steps: int = 10_000,
) -> dict[int, Forecast]:
    """Each queued request's placement time, simulated forward from `now`."""
    fabric = SimulatedFabric(topology)
    releases: list[tuple[float, int, tuple[int, ...]]] = []
    for n, holding in enumerate(holdings):
        if math.isfinite(holding.until):
            heapq.heappush(releases, (max(holding.until, now), n, holding.node_ids))
    # A tray whose window is over may become usable: those ends are moments to try again.
    window_ends = sorted(
        {end for c in topology.cliques for t in c.trays for _, end in t.maintenance if end > now}
    )
    moments = list(window_ends)
    heapq.heapify(moments)
    waiting = list(queue)
    answers: dict[int, Forecast] = {}
    clock, serial, steps = now, len(holdings), 0
    while waiting and steps < max_steps:
        steps += 1
        placed = queue_pass(fabric, waiting, clock, policy)
        for item, placement in placed:
            answers[item.key] = Forecast(clock, NOW if clock == now else ESTIMATED)
            if math.isfinite(item.hold):
                serial += 1
                heapq.heappush(releases, (clock + item.hold, serial, tuple(placement.node_ids)))
        done = {item.key for item, _ in placed}
        waiting = [w for w in waiting if w.key not in done]
        if not waiting:
            break
        moment = _next_moment(releases, moments, fabric)
        if moment is None:
            break
        clock = moment
    for item in waiting:
        answers[item.key] = _no_estimate(topology, item, now, policy)
    return answers


def queue_pass(
    fabric: SimulatedFabric, waiting: Sequence[Waiting], clock: float, policy: Policy
) -> list[tuple[Waiting, Placed]]:
    """One pass over the queue at `clock`, as the controller makes it."""
    placed: list[tuple[Waiting, Placed]] = []
    rejected: list[tuple[int, int]] = []
    topology = fabric.topology()
    for item in waiting:
        request = item.request
        if not item.constrained and any(
            request.num_nodes >= t and request.gpus_per_node >= g for t, g in rejected
        ):
            continue
        timed = replace(request, at=clock, until=clock + item.hold)
        outcome = policy(timed, topology)
        if not isinstance(outcome, Rejection):
            fabric.set(outcome.node_ids, TrayStatus.IN_USE)
            topology = fabric.topology()
            placed.append((item, outcome))
        elif not item.constrained:
            rejected.append((request.num_nodes, request.gpus_per_node))
    return placed


def _next_moment(
    releases: list[tuple[float, int, tuple[int, ...]]],
    moments: list[float],
    fabric: SimulatedFabric,
) -> float | None:
    """Advance to the next lease end or window end; free what ends then."""
    candidates = []
    if releases:
        candidates.append(releases[0][0])
    if moments:
        candidates.append(moments[0])
    if not candidates:
        return None
    clock = min(candidates)
    while releases and releases[0][0] <= clock:
        fabric.set(heapq.heappop(releases)[2], TrayStatus.FREE)
    while moments and moments[0] <= clock:
        heapq.heappop(moments)
    return clock


def _no_estimate(topology: Topology, item: Waiting, now: float, policy: Policy) -> Forecast:
    """Why no moment made it fit: impossible as the fabric is, or waiting on no lease end."""
    emptied = Topology(
        tuple(
            replace(
                c,
                trays=tuple(
                    replace(t, status=TrayStatus.FREE, maintenance=())
                    if t.status == TrayStatus.IN_USE
                    else replace(t, maintenance=())
                    for t in c.trays
                ),
            )
            for c in topology.cliques
        )
    )
    outcome = policy(item.request, emptied)
    if isinstance(outcome, Rejection):
        return Forecast(
            None,
            NEVER_FITS,
            "cannot fit even with every tray in use free again: " + outcome.message,
        )
    return Forecast(
        None,
        NO_LEASE_ENDS,
        "it needs trays held by domains without a lease end, so no time can be given",
    )
