"""How good are the placement estimates? A seeded trace replayed, every estimate scored.

The portal estimates when a queued request will be placed by simulating the queue forward
(`domains.placement.forecast`): leases end when they say, nobody new arrives, nobody
releases early. Real life differs: tenants release early and new small requests backfill
ahead of big ones. This replays a seeded trace of arrivals on a synthetic fabric through
the controller's own queue pass and `place()`, with those surprises in it, and compares
every estimate with the moment the request was really placed.

Per request: declared lifetime drawn from 1 h .. 24 h; with probability --early the tenant
releases it after 30-100% of its lease, else the lease expires. Arrivals are Poisson at
the rate that offers the fabric the given load. Estimates are scored twice: the one given
when the request arrived and queued ("at arrival"), and every refreshed one (after each
arrival and departure, as the portal refreshes them) until the request was placed.

    .venv/bin/python bench/eta.py [--trays 360] [--arrivals 2000] [--seeds 3]

Pure Python, no database.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, percentile
from domains.placement.algorithm import place
from domains.placement.forecast import Holding, SimulatedFabric, Waiting, forecast, queue_pass
from domains.placement.model import PlacementRequest, TrayStatus
from domains.placement.simulation import DEFAULT_SIZES, fabric_of

LIFETIMES_MIN = (60, 120, 240, 480, 720, 1440)
MINUTE = 60.0


@dataclass
class Scores:
    first: list[float] = field(default_factory=list)  # |error| of the estimate at arrival, min
    first_rel: list[float] = field(default_factory=list)  # |error| / real wait
    refreshed: list[float] = field(default_factory=list)
    no_estimate: int = 0
    queued: int = 0
    arrivals: int = 0
    forecast_s: list[float] = field(default_factory=list)


def run(trays: int, arrivals: int, load: float, early: float, seed: int) -> Scores:
    rng = random.Random(seed)
    topology = fabric_of(trays)
    fabric = SimulatedFabric(topology)
    mean_size = statistics.mean(DEFAULT_SIZES)
    mean_hold = statistics.mean(LIFETIMES_MIN) * MINUTE * (1 - early * 0.35)
    rate = load * topology.tray_count() / (mean_size * mean_hold)  # arrivals per second
    events: list[tuple[float, int, str, int]] = []  # (time, order, kind, key)
    clock = 0.0
    specs: dict[int, tuple[int, float, float]] = {}  # key → (size, lease s, real hold s)
    for key in range(1, arrivals + 1):
        clock += rng.expovariate(rate)
        lease = rng.choice(LIFETIMES_MIN) * MINUTE
        hold = lease * rng.uniform(0.3, 1.0) if rng.random() < early else lease
        specs[key] = (rng.choice(DEFAULT_SIZES), lease, hold)
        heapq.heappush(events, (clock, key, "arrive", key))
    running: dict[int, tuple[tuple[int, ...], float]] = {}  # key → (trays, lease end)
    queue: list[Waiting] = []
    first: dict[int, float | None] = {}
    seen: dict[int, list[float]] = {}
    placed_at: dict[int, float] = {}
    arrived_at: dict[int, float] = {}
    scores = Scores(arrivals=arrivals)
    serial = arrivals
    while events:
        now, _, kind, key = heapq.heappop(events)
        if kind == "arrive":
            size, lease, _ = specs[key]
            arrived_at[key] = now
            queue.append(Waiting(key, PlacementRequest(num_nodes=size), lease))
        else:
            fabric.set(running.pop(key)[0], TrayStatus.FREE)
        for item, placement in queue_pass(fabric, queue, now, place):
            _, lease, hold = specs[item.key]
            running[item.key] = (tuple(placement.node_ids), now + lease)
            placed_at[item.key] = now
            serial += 1
            heapq.heappush(events, (now + hold, serial, "leave", item.key))
        queue = [w for w in queue if w.key not in placed_at]
        if not queue:
            continue
        started = time.perf_counter()
        answers = forecast(
            fabric.topology(),
            [Holding(trays_, end) for trays_, end in running.values()],
            queue,
            now=now,
        )
        scores.forecast_s.append(time.perf_counter() - started)
        for item in queue:
            at = answers[item.key].at
            if item.key not in first:
                first[item.key] = at
            if at is not None:
                seen.setdefault(item.key, []).append(at)
    for key, estimate in first.items():
        if key not in placed_at:
            continue  # still queued when the trace ended: nothing to score against
        scores.queued += 1
        if estimate is None:
            scores.no_estimate += 1
            continue
        real = placed_at[key]
        wait = real - arrived_at[key]
        scores.first.append(abs(estimate - real) / MINUTE)
        if wait > 0:
            scores.first_rel.append(abs(estimate - real) / wait)
        scores.refreshed += [abs(at - real) / MINUTE for at in seen.get(key, [])]
    return scores


def describe(values: list[float], unit: str = "min") -> str:
    if not values:
        return "n/a"
    return (
        f"median {statistics.median(values):7.1f} {unit}  p90 {percentile(values, 90):7.1f} {unit}"
    )


def within(values: list[float], bound: float) -> str:
    if not values:
        return "n/a"
    return f"{100 * sum(1 for v in values if v <= bound) / len(values):5.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trays", type=int, default=360)
    parser.add_argument("--arrivals", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--early", type=float, default=0.3, help="share released early")
    parser.add_argument("--loads", default="0.8,0.95", help="offered loads to replay")
    args = parser.parse_args()
    banner("placement estimates: error against the replayed truth")
    print(
        f"# {args.trays} trays (racks of 18, every third split 9+9), {args.arrivals} arrivals "
        f"per trace, sizes {min(DEFAULT_SIZES)}-{max(DEFAULT_SIZES)} trays, leases 1-24 h, "
        f"{args.early:.0%} released early (after 30-100% of the lease)"
    )
    for load in (float(x) for x in args.loads.split(",")):
        total = Scores()
        for seed in range(1, args.seeds + 1):
            s = run(args.trays, args.arrivals, load, args.early, seed)
            total.first += s.first
            total.first_rel += s.first_rel
            total.refreshed += s.refreshed
            total.no_estimate += s.no_estimate
            total.queued += s.queued
            total.arrivals += s.arrivals
            total.forecast_s += s.forecast_s
        print(
            f"\noffered load {load:.0%}: {total.arrivals} arrivals, {total.queued} had to queue, "
            f"{total.no_estimate} of those got no estimate"
        )
        print(f"  at arrival   |error| {describe(total.first)}")
        print(
            f"               within ±15 min {within(total.first, 15)}, ±60 min "
            f"{within(total.first, 60)}, ±25% of the real wait {within(total.first_rel, 0.25)}"
        )
        print(f"  refreshed    |error| {describe(total.refreshed)} (n={len(total.refreshed)})")
        print(
            f"               within ±15 min {within(total.refreshed, 15)}, ±60 min "
            f"{within(total.refreshed, 60)}"
        )
        ms = [t * 1000 for t in total.forecast_s]
        print(
            f"  forecast of the whole queue: median {statistics.median(ms):.2f} ms, "
            f"p95 {percentile(ms, 95):.2f} ms, max {max(ms):.2f} ms (n={len(ms)})"
        )


if __name__ == "__main__":
    main()
