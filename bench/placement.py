"""Placement benchmark: time per decision at 100 / 1,000 / 10,000 trays (one clique, and a
72-tray request over 4 racks), and how much fragmentation best fit saves over first fit on
long seeded traces.

Pure function, no database: the topology is built in memory the way `topology_snapshot()`
hands it over. Target (docs/architecture.md): under 50 ms at 10,000 trays.

    .venv/bin/python bench/placement.py [--runs 200] [--db]

`--db` adds the path through PostgreSQL (BENCH_DATABASE_URL, dropped and re-created):
`topology_snapshot()` and the whole `domain_place()` service (advisory lock, snapshot,
members, channel, events) on operator-scale fabrics with live domains.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, percentile, summary_ms
from domains.placement.algorithm import clique_summaries, place, place_first_fit
from domains.placement.model import Placement, PlacementRequest, Rejection, Topology, TrayStatus
from domains.placement.simulation import (
    DEFAULT_SIZES,
    fabric_of,
    random_trace,
    run_trace,
)
from domains.placement.spanning import plan

SCALES = (100, 1_000, 10_000)
TARGET_MS = 50.0


def occupied(topology: Topology, rng: random.Random, busy: float = 0.6) -> Topology:
    """The fabric with about `busy` of its trays in use and a few cordoned or down."""
    statuses = (TrayStatus.IN_USE, TrayStatus.CORDONED, TrayStatus.DOWN)
    weights = (busy, 0.03, 0.01)

    def status() -> str:
        roll = rng.random()
        for s, w in zip(statuses, weights, strict=True):
            if roll < w:
                return s
            roll -= w
        return TrayStatus.FREE

    return Topology(
        tuple(
            replace(c, trays=tuple(replace(t, status=status()) for t in c.trays))
            for c in topology.cliques
        )
    )


def time_placement(trays: int, runs: int, seed: int) -> tuple[list[float], list[float], int]:
    """(place() seconds, clique_summaries() seconds, placements found) over `runs` fabrics."""
    rng = random.Random(seed)
    base = fabric_of(trays)
    fabrics = [occupied(base, rng) for _ in range(8)]
    place_s, summary_s, found = [], [], 0
    for i in range(runs):
        topology = fabrics[i % len(fabrics)]
        request = PlacementRequest(num_nodes=rng.choice(DEFAULT_SIZES))
        start = time.perf_counter()
        result = place(request, topology)
        place_s.append(time.perf_counter() - start)
        found += isinstance(result, Placement)
        start = time.perf_counter()
        clique_summaries(topology)
        summary_s.append(time.perf_counter() - start)
    return place_s, summary_s, found


def by_clique(topology: Topology, rng: random.Random) -> Topology:
    """The fabric as domains leave it: about half the cliques wholly in use, a fifth partly
    (their first slots), the rest free."""

    def used(size: int) -> int:
        roll = rng.random()
        return size if roll < 0.5 else rng.randrange(1, size) if roll < 0.7 else 0

    cliques = []
    for clique in topology.cliques:
        n = used(clique.size)
        trays = tuple(
            replace(t, status=TrayStatus.IN_USE) if i < n else t for i, t in enumerate(clique.trays)
        )
        cliques.append(replace(clique, trays=trays))
    return Topology(tuple(cliques))


def time_spanning(trays: int, runs: int, seed: int) -> dict[str, tuple[list[float], int]]:
    """`plan()` of 72 trays over 4 racks (`racks: 4`) and of 72 trays with no count (the
    fewest cliques) over `runs` fabrics: (seconds, placements found) each."""
    rng = random.Random(seed)
    base = fabric_of(trays)
    fabrics = [by_clique(base, rng) for _ in range(8)]
    requests = {"racks: 4": PlacementRequest(72, racks=4), "fewest": PlacementRequest(72)}
    out: dict[str, tuple[list[float], int]] = {}
    for name, request in requests.items():
        seconds, found = [], 0
        for i in range(runs):
            start = time.perf_counter()
            result = plan(request, fabrics[i % len(fabrics)])
            seconds.append(time.perf_counter() - start)
            found += not isinstance(result, Rejection)
        out[name] = (seconds, found)
    return out


def fragmentation(arrivals: int, seeds: range) -> None:
    print(
        f"\n## Fragmentation: {arrivals:,} arrivals per trace, 360 trays (20 racks, every "
        "third split 9+9)"
    )
    print(f"   request sizes drawn from {DEFAULT_SIZES}")
    topology = fabric_of(360)
    mean_size = statistics.fmean(DEFAULT_SIZES)
    for hold in (30.0, 45.0, 60.0):
        load = mean_size * hold / topology.tray_count()
        print(f"\n   offered load {load:.0%} of the trays (mean hold {hold:.0f} arrivals)")
        print(
            f"{'mean hold':>10} {'seed':>5} {'best fit placed':>16} {'first fit placed':>17} "
            f"{'refused trays bf/ff':>20}"
        )
        wins = 0
        for seed in seeds:
            trace = random_trace(seed=seed, arrivals=arrivals, mean_hold=hold)
            best = run_trace(place, topology, trace)
            first = run_trace(place_first_fit, topology, trace)
            wins += best.placed > first.placed
            print(
                f"{hold:>10.0f} {seed:>5} {best.placed:>8} ({best.placed_ratio:6.1%})"
                f" {first.placed:>8} ({first.placed_ratio:6.1%})"
                f" {best.refused_trays:>9}/{first.refused_trays:<9}"
            )
        print(f"{'':>10} best fit placed more in {wins} of {len(seeds)} traces")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--arrivals", type=int, default=20_000)
    parser.add_argument("--db", action="store_true", help="also time the PostgreSQL path")
    args, _ = parser.parse_known_args()

    banner("Placement: pure best-fit place() over an in-memory topology")
    print(f"## Time per decision ({args.runs} runs each, ~60% of trays in use, random sizes)")
    worst_p95 = 0.0
    for trays in SCALES:
        place_s, summary_s, found = time_placement(trays, args.runs, seed=trays)
        p95 = percentile([s * 1000 for s in place_s], 95)
        worst_p95 = max(worst_p95, p95) if trays == SCALES[-1] else worst_p95
        print(f"{trays:>6} trays  place()           {summary_ms(place_s)}  placed {found}")
        print(f"{'':>6}        clique_summaries()  {summary_ms(summary_s)}")
        for name, (seconds, spanned) in time_spanning(trays, args.runs, seed=trays).items():
            if trays == SCALES[-1]:
                worst_p95 = max(worst_p95, percentile([s * 1000 for s in seconds], 95))
            label = f"plan(72, {name})"
            print(f"{'':>6}        {label:<19} {summary_ms(seconds)}  placed {spanned}")
    verdict = "meets" if worst_p95 < TARGET_MS else "MISSES"
    print(f"10,000 trays: p95 {worst_p95:.2f} ms {verdict} the {TARGET_MS:.0f} ms target")
    start = time.perf_counter()
    fragmentation(args.arrivals, range(3))
    print(f"\n(fragmentation traces took {time.perf_counter() - start:.1f} s)")
    if args.db:
        with_database(runs=30)


def with_database(runs: int) -> None:
    """Snapshot and the placement service against PostgreSQL, at two fabric sizes."""
    from bench.common import setup_django

    setup_django()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from bench.scale import build_scale_fabric
    from domains.audit.events import SYSTEM
    from domains.computedomains.fabric import topology_snapshot
    from domains.computedomains.placing import domain_place
    from domains.computedomains.services import domain_request
    from domains.computedomains.specs import DomainSpec
    from domains.inventory.models import Node
    from domains.tenancy.models import Namespace

    print(
        "\n## Through PostgreSQL (snapshot = 2 queries; domain_place = the whole service, "
        "after-commit signals included)"
    )
    for racks, live in ((100, 500), (250, 1250)):
        call_command("flush", interactive=False, verbosity=0)
        fabric = build_scale_fabric(racks=racks, live_domains=live)
        Node.objects.update(last_heartbeat=timezone.now())  # agents alive: free trays count
        trays = sum(c.size for c in topology_snapshot().cliques)
        snap_s = []
        for _ in range(runs):
            start = time.perf_counter()
            topology_snapshot()
            snap_s.append(time.perf_counter() - start)
        ns = Namespace.objects.get(name=fabric.namespaces[0])
        place_s, placed = [], 0
        for i in range(runs):
            spec = DomainSpec(name=f"bench-{racks}-{i}", num_nodes=2)
            domain = domain_request(actor=SYSTEM, namespace=ns, spec=spec)
            start = time.perf_counter()
            result = domain_place(domain_id=domain.pk)
            place_s.append(time.perf_counter() - start)
            placed += result is not None and result.phase == "Forming"
        print(f"{trays:>6} trays, {fabric.live_domains} live domains ({connection.vendor})")
        print(f"       topology_snapshot()  {summary_ms(snap_s)}")
        print(f"       domain_place()       {summary_ms(place_s)}  placed {placed}")


if __name__ == "__main__":
    main()
