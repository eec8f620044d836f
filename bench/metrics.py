"""What a /metrics scrape costs as the history grows.

/metrics reads its figures from the database at scrape time. Until the lifecycle counted
its histograms at the transitions (domains/computedomains/tallies.py), a scrape rebuilt them
from every domain that ever formed and every tray-ready event of their formations. This
measures one scrape (server time in-process, through the whole Django stack) on the
100-rack fabric of bench/scale.py, with a history of finished domains of 8 trays added in
steps: each adds its domains' rows, 8 `member.ready` events per domain, and (where the
code counts them) the observations their transitions would have counted.

    .venv/bin/python bench/metrics.py [--history 0,10000,50000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, setup_django

TRAYS_PER_DOMAIN = 8
BATCH = 2_000


def add_history(count: int, start: int, rng: random.Random) -> None:
    """`count` released domains, formed and released over the last weeks, with their
    tray-ready events (bulk inserts: fixture data; the scrape is what is measured)."""
    from django.db import connection, transaction
    from django.utils import timezone

    from domains.audit.models import Event
    from domains.computedomains.models import ComputeDomain, Phase
    from domains.inventory.models import Node
    from domains.tenancy.models import Namespace

    namespaces = list(Namespace.objects.order_by("name"))
    nodes = list(Node.objects.values_list("pk", flat=True))
    now = timezone.now()
    for first in range(start, start + count, BATCH):
        with transaction.atomic():
            domains = []
            for i in range(first, min(first + BATCH, start + count)):
                t0 = now - timedelta(days=30) + timedelta(seconds=i * 20)
                placed = t0 + timedelta(seconds=rng.uniform(0.02, 0.2))
                ready = placed + timedelta(seconds=rng.uniform(0.5, 30))
                domains.append(
                    ComputeDomain(
                        namespace=namespaces[i % len(namespaces)],
                        name=f"history-{i}",
                        num_nodes=TRAYS_PER_DOMAIN,
                        resource_claim_template="bench",
                        phase=Phase.RELEASED,
                        admitted_at=t0,
                        placed_at=placed,
                        ready_at=ready,
                        release_requested_at=ready + timedelta(hours=1),
                        released_at=ready + timedelta(hours=1, seconds=rng.uniform(0.3, 10)),
                    )
                )
            created = ComputeDomain.objects.bulk_create(domains)
            for d in created:
                d.created_at = d.admitted_at  # as the UPDATE below makes it
            events = [
                Event(
                    actor_kind="agent",
                    actor_name="bench",
                    verb="member.ready",
                    object_type="domain",
                    object_id=str(d.pk),
                    object_repr=d.name,
                    namespace_id=d.namespace_id,
                    domain=d,
                    node_id=node,
                )
                for d in created
                for node in rng.sample(nodes, TRAYS_PER_DOMAIN)
            ]
            Event.objects.bulk_create(events)
            ids = [d.pk for d in created]
            with connection.cursor() as cursor:  # the stamps a real formation would leave
                cursor.execute(
                    "UPDATE computedomains_computedomain SET created_at = admitted_at"
                    " WHERE id = ANY(%s)",
                    [ids],
                )
                cursor.execute(
                    "UPDATE computedomains_event e SET created_at = d.placed_at"
                    " + (d.ready_at - d.placed_at) * random()"
                    " FROM computedomains_computedomain d"
                    " WHERE e.domain_id = d.id AND d.id = ANY(%s)",
                    [ids],
                )
        _tally(created, rng)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _tally(domains: list, rng: random.Random) -> None:
    """What the transitions of these finished domains would have counted (fixture data)."""
    try:
        from domains.computedomains import tallies
    except ImportError:  # the code before the tallies: nothing to count
        return
    seconds = tallies.seconds_between
    tallies.observe(tallies.FORMATION, [seconds(d.created_at, d.ready_at) for d in domains])
    released = [seconds(d.release_requested_at, d.released_at) for d in domains]
    tallies.observe(tallies.RELEASE, released)
    step = tallies.FORMATION_STEP
    tallies.observe(step, [seconds(d.admitted_at, d.placed_at) for d in domains], label="placed")
    trays = [rng.uniform(0, seconds(d.placed_at, d.ready_at)) for d in domains for _ in range(8)]
    tallies.observe(step, trays, label="tray_ready")
    for namespace_id in {d.namespace_id for d in domains}:
        ended = sum(1 for d in domains if d.namespace_id == namespace_id)
        tallies.count(tallies.ENDED, label=f"{namespace_id}:Released", by=ended)


def scrape(repeat: int) -> tuple[float, float, int, int]:
    """(median ms, max ms, queries, bytes) of a scrape by a staff session."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(get_user_model().objects.get(username="ops"))
    times, queries, size = [], 0, 0
    for i in range(repeat + 1):
        with CaptureQueriesContext(connection) as ctx:
            started = time.perf_counter()
            resp = client.get("/metrics", secure=True)
            elapsed = time.perf_counter() - started
        assert resp.status_code == 200, resp.status_code
        queries, size = len(ctx.captured_queries), len(resp.content)
        if i:  # the first request warms caches
            times.append(elapsed)
    return statistics.median(times) * 1000, max(times) * 1000, queries, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", default="0,10000,50000", help="finished domains, cumulative")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    banner("/metrics: one scrape as the history grows (100 racks, 500 live domains)")
    setup_django(fresh=True)
    from bench.scale import build_scale_fabric

    fabric = build_scale_fabric(racks=100, live_domains=500)
    print(f"# {fabric.racks} racks: {fabric.trays} trays, {fabric.live_domains} live domains")
    rng = random.Random(11)
    print(f"{'finished domains':>16s} {'ready events':>13s} {'median ms':>10s} {'max ms':>8s} "
          f"{'queries':>8s} {'KiB':>6s}")  # fmt: skip
    done = 0
    for target in (int(n) for n in args.history.split(",")):
        add_history(target - done, done, rng)
        done = target
        median, worst, queries, size = scrape(args.repeat)
        print(f"{done:16,d} {done * TRAYS_PER_DOMAIN:13,d} {median:10.1f} {worst:8.1f} "
              f"{queries:8d} {size / 1024:6.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
