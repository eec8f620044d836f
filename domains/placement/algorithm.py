"""Placement: choose `num_nodes` free trays inside ONE NVLink clique, deterministically.

Best fit, twice over:

1. Across cliques, the clique with the *fewest* free trays that still fits wins (ties: the
   first in topology order). Small holes get filled first, so large cliques stay whole for
   large requests — the classic bin-packing argument, and what
   `tests/domains/test_placement.py` checks against first fit on a seeded trace.
2. Inside the clique, the trays come from the *tightest* run of consecutive free slots that
   holds the request (taken from the start of the run), so the largest contiguous free block
   survives. When no single run holds it, whole small runs are consumed first. Contiguity is
   what operators see on the rack view and what keeps partitions tidy for re-partitioning.

Everything here is pure (dataclasses in, dataclasses out) and O(trays).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from domains.placement.model import (
    CliqueSummary,
    CliqueView,
    Placement,
    PlacementRequest,
    Rejection,
    Topology,
    Tray,
    TrayStatus,
)


def place(request: PlacementRequest, topology: Topology) -> Placement | Rejection:
    """Best-fit placement of `request`, or the human reasons why nothing fits now."""
    candidates, problem = _candidates(request, topology)
    if problem:
        return Rejection((problem,))
    best: tuple[int, int, CliqueView, list[Tray]] | None = None
    for order, clique in enumerate(candidates):
        free = clique.trays_for(request)
        if len(free) >= request.num_nodes and (best is None or len(free) < best[0]):
            best = (len(free), order, clique, free)
    if best is None:
        return _rejection(request, candidates)
    free_count, _, clique, free = best
    chosen = _tightest_trays(free, request.num_nodes)
    return _placement(clique, chosen, free_count)


def place_first_fit(request: PlacementRequest, topology: Topology) -> Placement | Rejection:
    """The naive baseline: first clique in order with room, its first free trays.

    Kept for the fragmentation comparison in tests and bench/placement.py only.
    """
    candidates, problem = _candidates(request, topology)
    if problem:
        return Rejection((problem,))
    for clique in candidates:
        free = clique.trays_for(request)
        if len(free) >= request.num_nodes:
            return _placement(clique, free[: request.num_nodes], len(free))
    return _rejection(request, candidates)


def cliques_to_follow(request: PlacementRequest, topology: Topology) -> list[CliqueView]:
    """The cliques a domain that follows its workload may take trays from: every clique its
    constraint allows (any: all of them; a rack: that rack's; a clique: that one), in
    topology order; none when it allows none. `request.num_nodes` is not used: such a
    domain asks for no number of trays."""
    candidates, problem = _candidates(replace(request, num_nodes=1), topology)
    return [] if problem else candidates


def replacement_tray(free: list[Tray]) -> Tray | None:
    """The tray to replace one a domain lost, from `free` (one clique's, in slot order): from
    the tightest run of free slots, so the largest free block stays whole."""
    chosen = _tightest_trays(free, 1) if free else []
    return chosen[0] if chosen else None


def free_runs(trays: Sequence[Tray]) -> list[list[Tray]]:
    """Maximal runs of free trays in consecutive slots, in slot order."""
    runs: list[list[Tray]] = []
    current: list[Tray] = []
    for tray in trays:
        if tray.free and current and tray.slot == current[-1].slot + 1:
            current.append(tray)
            continue
        if current:
            runs.append(current)
        current = [tray] if tray.free else []
    if current:
        runs.append(current)
    return runs


def clique_summaries(topology: Topology, *, smallest_request: int = 1) -> list[CliqueSummary]:
    """Occupancy and fragmentation per clique, in topology order.

    `stranded` counts free trays of cliques that have fewer free trays than the smallest
    request the portal allows (`smallest_request`, 1 unless the operator configures
    PORTAL["SMALLEST_REQUEST_NODES"]): capacity that exists but no tenant can use.
    `fragmented` counts free trays outside the clique's largest contiguous free block.
    """
    summaries = []
    for clique in topology.cliques:
        counts = Counter(t.status for t in clique.trays)
        free = counts[TrayStatus.FREE]
        largest = max((len(r) for r in free_runs(clique.trays)), default=0)
        summaries.append(
            CliqueSummary(
                clique_id=clique.clique_id,
                label=clique.label,
                name=clique.name,
                rack=clique.rack,
                total=clique.size,
                free=free,
                in_use=counts[TrayStatus.IN_USE],
                unavailable=clique.size - free - counts[TrayStatus.IN_USE],
                largest_free_block=largest,
                stranded=free if free < smallest_request else 0,
                fragmented=free - largest,
            )
        )
    return summaries


# --- helpers ---------------------------------------------------------------------------------


def _candidates(
    request: PlacementRequest, topology: Topology
) -> tuple[list[CliqueView], str | None]:
    """Cliques the constraint allows, or the reason there are none."""
    if request.num_nodes < 1:
        return [], "needs at least 1 tray"
    target = request.target
    if request.constraint == "clique":
        found = [c for c in topology.cliques if target in (c.label, c.name)]
        return found, None if found else f"no clique named {target!r}"
    if request.constraint == "rack":
        found = [c for c in topology.cliques if c.rack == target]
        return found, None if found else f"no rack named {target!r} with an NVLink clique"
    if not topology.cliques:
        return [], "the fabric has no NVLink clique with trays"
    return list(topology.cliques), None


def _tightest_trays(free: list[Tray], n: int) -> list[Tray]:
    """n trays from the runs of free slots, keeping the largest free block intact.

    If one run holds them all, the tightest such run (the domain stays contiguous).
    Otherwise whole runs are used up smallest first and the rest comes from the next one,
    so the holes close and the biggest run loses as little as possible.
    """
    runs = free_runs(free) if _sorted_by_slot(free) else [[t] for t in free]
    fitting = [r for r in runs if len(r) >= n]
    if fitting:
        return min(fitting, key=len)[:n]  # `min` keeps the first on ties (determinism)
    chosen: list[Tray] = []
    for run in sorted(runs, key=len):  # stable: equal lengths stay in slot order
        chosen.extend(run[: n - len(chosen)])
        if len(chosen) == n:
            break
    return sorted(chosen, key=lambda t: t.slot)


def _sorted_by_slot(trays: list[Tray]) -> bool:
    return all(a.slot < b.slot for a, b in itertools.pairwise(trays))


def _placement(clique: CliqueView, trays: list[Tray], free_before: int) -> Placement:
    return Placement(
        clique_id=clique.clique_id,
        clique_label=clique.label,
        clique_name=clique.name,
        rack=clique.rack,
        trays=tuple(trays),
        free_before=free_before,
    )


def where(clique: CliqueView) -> str:
    """'rack gb-r02 clique gb-r02-c0', the way reasons name a clique."""
    return f"rack {clique.rack} clique {clique.name}" if clique.rack else f"clique {clique.name}"


def _rejection(request: PlacementRequest, candidates: list[CliqueView]) -> Rejection:
    n = request.num_nodes
    biggest = max(candidates, key=lambda c: c.size)
    if n > biggest.size:
        scope = "the largest clique" if request.constraint == "any" else "the largest allowed"
        return Rejection(
            (
                f"needs {n} trays in one clique; {scope} ({where(biggest)}) "
                f"has only {biggest.size} trays",
            )
        )
    # Most free first; on ties the first in topology order (max keeps the first).
    best = max(candidates, key=lambda c: len(c.trays_for(request)))
    free = len(best.trays_for(request))
    reasons = [
        f"needs {n} free trays in one clique; best is {where(best)} with {free} free",
        breakdown(best, request),
    ]
    if len(candidates) > 1:
        total_free = sum(len(c.trays_for(request)) for c in candidates)
        reasons.append(
            f"{total_free} free trays in {len(candidates)} cliques, but a domain cannot span "
            "cliques (NVLink reaches only inside one)"
        )
    return Rejection(tuple(reasons))


def breakdown(clique: CliqueView, request: PlacementRequest) -> str:
    """'gb-r02-c0: 7 free, 9 in use, 2 cordoned (gb-r02-t03, gb-r02-t04)'."""
    gpus_per_node = request.gpus_per_node
    parts = [f"{len(clique.trays_for(request))} free"]
    by_status: dict[str, list[str]] = {}
    for tray in clique.trays:
        if not tray.free:
            by_status.setdefault(tray.status, []).append(tray.hostname)
    for status, hosts in by_status.items():
        label = TrayStatus.LABELS.get(status, status)
        named = f" ({', '.join(hosts[:4])}{', …' if len(hosts) > 4 else ''})"
        parts.append(f"{len(hosts)} {label}" + ("" if status == TrayStatus.IN_USE else named))
    small = [t for t in clique.trays if t.free and t.gpu_count < gpus_per_node]
    if small:
        parts.append(f"{len(small)} with fewer than {gpus_per_node} GPUs")
    serviced = [
        t.hostname
        for t in clique.trays
        if t.free and not t.clear_of_maintenance(request.at, request.until)
    ]
    if serviced:
        more = ", …" if len(serviced) > 4 else ""
        parts.append(
            f"{len(serviced)} with maintenance before the lease would end "
            f"({', '.join(serviced[:4])}{more})"
        )
    return f"{clique.name}: " + ", ".join(parts)
