"""Pages and API at operator scale: server time and query count at 10 and at 100 racks.

100 racks = 1,800 trays, 7,200 GPUs, 500 live domains (bench/scale.py). Requests go
through the whole Django stack in-process (middleware, auth, templates, DRF), so the time
is server time without the network. The query count of each page must be the same at 10
and at 100 racks: a count that grows with the fabric is an N+1.

    .venv/bin/python bench/pages.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, setup_django


def targets() -> list[tuple[str, str, str]]:
    """(label, who, path) for every page and list endpoint measured."""
    from domains.inventory.models import Rack

    rack = Rack.objects.order_by("position").first().name
    return [
        ("fabric overview", "ops", "/fabric/"),
        ("rack page", "ops", f"/fabric/racks/{rack}/"),
        ("all domains (operator)", "ops", "/fabric/domains/"),
        ("channel ledger", "ops", "/fabric/channels/"),
        ("tenant dashboard", "tenant00", "/ns/tenant-00/"),
        ("API racks", "ops", "/api/v1/racks/"),
        ("API cliques", "ops", "/api/v1/cliques/"),
        ("API nodes", "ops", "/api/v1/nodes/"),
        ("API nodes (tenant)", "tenant00", "/api/v1/nodes/"),
        ("API computedomains", "tenant00", "/api/v1/namespaces/tenant-00/computedomains/"),
        ("API events (operator)", "ops", "/api/v1/events/"),
    ]


def measure(repeat: int) -> dict[str, tuple[float, int, int, int]]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    users = get_user_model().objects
    clients = {}
    for who in ("ops", "tenant00"):
        clients[who] = Client()
        clients[who].force_login(users.get(username=who))
    results = {}
    for label, who, path in targets():
        times, status, size, queries = [], 0, 0, 0
        for i in range(repeat + 1):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                resp = clients[who].get(path, secure=True)  # production redirects plain HTTP
                elapsed = time.perf_counter() - started
            status, size, queries = resp.status_code, len(resp.content), len(ctx.captured_queries)
            if i:  # the first request warms template and URL caches
                times.append(elapsed)
        results[label] = (statistics.median(times), queries, status, size)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    banner("pages and API: server time and queries at 10 and 100 racks")
    import tempfile

    from bench.scale import build_scale_fabric

    # Production settings: hashed static files from collectstatic, like a real deployment.
    static_root = tempfile.mkdtemp(prefix="bench-static-")
    setup_django(fresh=True, STATIC_ROOT=static_root)
    from django.core.management import call_command

    call_command("collectstatic", verbosity=0, interactive=False)
    runs = {}
    for racks, domains in ((10, 50), (100, 500)):
        if runs:
            reset()
        fabric = build_scale_fabric(racks=racks, live_domains=domains)
        print(f"# {racks} racks: {fabric.trays} trays, {fabric.gpus} GPUs, "
              f"{fabric.live_domains} live domains")  # fmt: skip
        runs[racks] = measure(args.repeat)
    small, large = runs[10], runs[100]
    print(f"{'page':28s} {'ms@100':>8s} {'q@10':>5s} {'q@100':>6s} {'status':>6s} {'KiB':>7s}")
    grew = []
    for label, (t, q, status, size) in large.items():
        q_small = small[label][1]
        if q != q_small:
            grew.append(label)
        print(f"{label:28s} {t * 1000:8.1f} {q_small:5d} {q:6d} {status:6d} {size / 1024:7.1f}")
    print(f"query counts constant in the number of racks: {grew or 'yes'}")


def reset() -> None:
    """Empty every table for the next fabric size (keeps the migrated schema)."""
    from django.core.management import call_command

    call_command("flush", verbosity=0, interactive=False)


if __name__ == "__main__":
    main()
