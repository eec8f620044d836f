"""Synthetic fabrics and request traces, to compare placement policies without a database.

Used by the placement tests and `bench/placement.py`: a seeded trace of arrivals (a domain
of some size asks for trays and holds them for a while) and departures, replayed against a
policy (`place` or `place_first_fit`). A request that does not fit on arrival is counted
as refused — the fewer refusals, the less the policy fragmented the fabric.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from domains.placement.model import (
    CliqueView,
    Placement,
    PlacementRequest,
    Rejection,
    Topology,
    Tray,
    TrayStatus,
)

Policy = Callable[[PlacementRequest, Topology], Placement | Rejection]

# Tenants mostly ask for small domains, sometimes for a half or a whole rack.
DEFAULT_SIZES = (1, 1, 1, 2, 2, 2, 3, 4, 4, 6, 8, 9, 12, 16, 18)


def synthetic_topology(layouts: Sequence[Sequence[int]], gpus: int = 4) -> Topology:
    """Racks from clique sizes, e.g. [(18,), (9, 9)]: every tray free, slots 1..18."""
    cliques: list[CliqueView] = []
    node_id = 0
    for r, layout in enumerate(layouts, start=1):
        slot = 0
        for c, size in enumerate(layout):
            trays = []
            for _ in range(size):
                slot += 1
                node_id += 1
                trays.append(Tray(node_id, f"r{r:03d}-t{slot:02d}", slot, f"10.{r}.0.{slot}", gpus))
            name = f"r{r:03d}-c{c}"
            cliques.append(
                CliqueView(len(cliques) + 1, f"uuid-{r}.{c}", name, f"r{r:03d}", tuple(trays))
            )
    return Topology(tuple(cliques))


def fabric_of(trays: int) -> Topology:
    """About `trays` trays: racks of 18, every third one split into two 9-tray cliques."""
    racks = max(1, round(trays / 18))
    return synthetic_topology([(9, 9) if r % 3 == 2 else (18,) for r in range(racks)])


@dataclass(frozen=True)
class Arrival:
    at: float
    size: int
    hold: float


def random_trace(
    *, seed: int, arrivals: int, sizes: Sequence[int] = DEFAULT_SIZES, mean_hold: float = 40.0
) -> list[Arrival]:
    """Poisson-ish arrivals (one per time unit on average) with exponential hold times."""
    rng = random.Random(seed)
    at = 0.0
    trace = []
    for _ in range(arrivals):
        at += rng.expovariate(1.0)
        trace.append(Arrival(at, rng.choice(sizes), rng.expovariate(1.0 / mean_hold)))
    return trace


@dataclass
class TraceResult:
    placed: int
    refused: int
    refused_trays: int  # trays asked for by refused requests

    @property
    def placed_ratio(self) -> float:
        total = self.placed + self.refused
        return self.placed / total if total else 1.0


class Fabric:
    """A mutable wrapper: take and give back trays, read the current `Topology`."""

    def __init__(self, topology: Topology) -> None:
        self._cliques = list(topology.cliques)
        self._index = {c.clique_id: i for i, c in enumerate(self._cliques)}
        self.topology = topology

    def take(self, placement: Placement) -> None:
        self._set(placement.clique_id, {t.node_id for t in placement.trays}, TrayStatus.IN_USE)

    def give_back(self, placement: Placement) -> None:
        self._set(placement.clique_id, {t.node_id for t in placement.trays}, TrayStatus.FREE)

    def _set(self, clique_id: int, node_ids: set[int], status: str) -> None:
        i = self._index[clique_id]
        clique = self._cliques[i]
        trays = tuple(
            replace(t, status=status) if t.node_id in node_ids else t for t in clique.trays
        )
        self._cliques[i] = replace(clique, trays=trays)
        self.topology = Topology(tuple(self._cliques))


def run_trace(policy: Policy, topology: Topology, trace: Sequence[Arrival]) -> TraceResult:
    """Replay arrivals and departures in time order against `policy`."""
    fabric = Fabric(topology)
    departures: list[tuple[float, int, Placement]] = []
    result = TraceResult(0, 0, 0)
    for n, arrival in enumerate(trace):
        while departures and departures[0][0] <= arrival.at:
            fabric.give_back(heapq.heappop(departures)[2])
        outcome = policy(PlacementRequest(num_nodes=arrival.size), fabric.topology)
        if isinstance(outcome, Placement):
            fabric.take(outcome)
            heapq.heappush(departures, (arrival.at + arrival.hold, n, outcome))
            result.placed += 1
        else:
            result.refused += 1
            result.refused_trays += arrival.size
    return result
