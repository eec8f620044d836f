"""Pages and API at operator scale: server time and query count at 2, 100 and 1,000
racks, and the Fleet page in real Chromium at each size.

100 racks = 1,800 trays, 7,200 GPUs, 500 live domains; 1,000 racks = 18,000 trays, 72,000
GPUs, 5,000 live domains (bench/scale.py). Requests go through the whole Django stack
in-process (middleware, auth, templates, DRF), so the time is server time without the
network. The query count of each page must be the same at every size: a count that grows
with the fabric is an N+1. The fabric gets a day of history (domains asked for, placed and
Ready at times spread over the last 24 hours) and a maintenance window on every tenth rack,
so that the Fleet's trends and maintenance bands read and draw real rows. *CPU ms* is the
web process's own CPU time per request at the largest size (not PostgreSQL's): on a
shared machine it moves far less with other work's load than the wall-clock time.

The Chromium figures load the fleet page (`/fabric/`) from a real uvicorn server in
Debian's Chromium (Playwright) and read the browser's Navigation Timing: *interactive* is
DOMContentLoaded finished (the document parsed, deferred scripts — htmx, live updates —
run, so links, filters and forms respond), *load* is the load event. Median of `--repeat`
cold page loads (a new browser context each). Targets: interactive in < 1 s at
100 racks and < 2 s at 1,000.

    .venv/bin/python bench/pages.py [--repeat 5] [--sizes 2,100,1000] [--no-browser]
        [--screenshots docs/img]

With `--screenshots DIR`, the Fleet at 2 and 100 racks is saved there as seen at
1440x900 (`fleet-2-racks.png`, `fleet-100-racks.png`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, setup_django


def targets() -> list[tuple[str, str, str]]:
    """(label, who, path) for every page and list endpoint measured."""
    from django.db.models import Count, Q

    from domains.computedomains.models import ComputeDomain
    from domains.inventory.models import Node, Rack

    rack = Rack.objects.order_by("position").first().name
    tray = Node.objects.filter(rack__name=rack).order_by("slot").first().hostname
    held = Count("members", filter=Q(members__active=True))
    largest = ComputeDomain.objects.annotate(held=held).order_by("-held", "pk").first()
    return [
        ("fleet (fabric) page", "ops", "/fabric/"),
        ("fleet, filtered by tenant", "ops", "/fabric/?tenant=tenant-01"),
        ("fleet, one domain outlined", "ops", f"/fabric/?domain={largest.uid}"),
        ("rack page", "ops", f"/fabric/racks/{rack}/"),
        ("tray page", "ops", f"/fabric/nodes/{tray}/"),
        ("needs attention", "ops", "/fabric/attention/"),
        ("versions", "ops", "/fabric/versions/"),
        ("maintenance calendar, week", "ops", "/fabric/maintenance/calendar/"),
        ("maintenance calendar, month", "ops", "/fabric/maintenance/calendar/?view=month"),
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


def heartbeats() -> None:
    """Every tray's agent heartbeats, as a live fleet's do, but for the trays
    `add_gpu_health` silenced (10 minutes ago). Without it the fabric built a minute before
    would read, past `PORTAL_HEARTBEAT_STALE_S`, as a fleet whose every agent went silent:
    18,000 rows on the needs-attention list and every Fleet cell "not ready"."""
    from datetime import timedelta

    from django.utils import timezone

    from domains.inventory.models import Node

    now = timezone.now()
    Node.objects.filter(last_heartbeat__gt=now - timedelta(minutes=5)).update(last_heartbeat=now)


def measure(repeat: int) -> dict[str, tuple[float, int, int, int, float]]:
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
        heartbeats()
        times, cpu, status, size, queries = [], [], 0, 0, 0
        for i in range(repeat + 1):
            with CaptureQueriesContext(connection) as ctx:
                started, started_cpu = time.perf_counter(), time.process_time()
                resp = clients[who].get(path, secure=True)  # production redirects plain HTTP
                elapsed = time.perf_counter() - started
                spent = time.process_time() - started_cpu
            status, size, queries = resp.status_code, len(resp.content), len(ctx.captured_queries)
            if i:  # the first request warms template and URL caches
                times.append(elapsed)
                cpu.append(spent)
        results[label] = (statistics.median(times), queries, status, size, statistics.median(cpu))
    return results


CHROMIUM = "/usr/bin/chromium"


def add_history(seed: int = 11) -> None:
    """Spread the live domains' lives over the last day (asked for, placed after a wait,
    Ready some seconds later, their trays held since), and put a maintenance window on
    every tenth rack."""
    import random
    from datetime import timedelta

    from django.db.models import OuterRef, Subquery
    from django.utils import timezone

    from domains.computedomains.models import ComputeDomain, DomainMember
    from domains.inventory.models import MaintenanceWindow, Node, Rack

    rng = random.Random(seed)
    now = timezone.now()
    by_age: dict[int, list[int]] = {}
    for pk in ComputeDomain.objects.values_list("pk", flat=True):
        by_age.setdefault(rng.randrange(0, 24 * 60, 5), []).append(pk)
    for minutes, pks in by_age.items():
        asked = now - timedelta(minutes=minutes)
        placed = asked + timedelta(seconds=rng.uniform(0, 300))
        ComputeDomain.objects.filter(pk__in=pks).update(
            created_at=asked,
            admitted_at=asked,
            placed_at=placed,
            ready_at=placed + timedelta(seconds=rng.uniform(5, 70)),
        )
    domain_placed = ComputeDomain.objects.filter(pk=OuterRef("domain_id")).values("placed_at")
    DomainMember.objects.update(assigned_at=Subquery(domain_placed[:1]))
    for rack in Rack.objects.order_by("position")[::10]:
        window = MaintenanceWindow.objects.create(
            scope="rack",
            target=rack.name,
            reason="firmware update",
            starts_at=now + timedelta(hours=2),
            ends_at=now + timedelta(hours=4),
        )
        window.nodes.set(Node.objects.filter(rack=rack))
    add_gpu_health(now)


def add_gpu_health(now) -> None:
    """Every GPU with the readings its agent sends (one statement), and on every tenth rack
    one tray whose GPU had an XID and one whose agent went silent: the Fleet's overlay and
    the needs-attention list read and draw real rows."""
    from datetime import timedelta

    from django.db.models import F

    from domains.inventory.models import Gpu, Node, Rack

    sample = {"temperature_c": 45, "power_mw": 612000, "xid_count": 0, "last_xid": 0,
              "nvlink_crc_flit_errors": 0, "nvlink_crc_data_errors": 0,
              "nvlink_replay_errors": 0, "nvlink_recovery_errors": 0, "ecc_corrected": 0,
              "ecc_uncorrected": 0}  # fmt: skip
    Gpu.objects.update(telemetry=sample, telemetry_at=now, temperature_c=45 + F("index"))
    for rack in Rack.objects.order_by("position")[5::10]:
        sick, silent = Node.objects.filter(rack=rack).order_by("slot")[:2]
        Gpu.objects.filter(node=sick, index=1).update(
            xid_since=now, xid_at=now, telemetry={**sample, "xid_count": 1, "last_xid": 79}
        )
        Node.objects.filter(pk=silent.pk).update(last_heartbeat=now - timedelta(minutes=10))


def chromium_fleet(
    repeat: int, screenshot: Path | None = None
) -> tuple[float, float, float, float]:
    """Median (server, interactive, load in ms; KiB transferred) of the fleet page in
    Chromium; *server* is the request's time to first byte. `screenshot`: where to save
    the first screen of the page, at 1440x900."""
    import os
    import subprocess

    import httpx
    from django.conf import settings
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.sessions.backends.db import SessionStore
    from playwright.sync_api import sync_playwright

    from testbed.processes import free_port

    user = get_user_model().objects.get(username="ops")
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save()
    port = free_port()
    env = {**os.environ, "SECURE_SSL_REDIRECT": "0"}  # plain HTTP on loopback
    server = subprocess.Popen(
        [sys.executable, "-m", "portal.serve", "portal.asgi:application",
         "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"],
        env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        # The sync API runs an event loop in this thread; the ORM calls above are done.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            cookie = {"name": settings.SESSION_COOKIE_NAME, "value": store.session_key,
                      "domain": "127.0.0.1", "path": "/"}  # fmt: skip
            runs = []
            for i in range(repeat + 1):
                heartbeats()
                context = browser.new_context(viewport={"width": 1440, "height": 900})
                context.add_cookies([cookie])
                page = context.new_page()
                page.goto(f"{url}/fabric/", wait_until="load", timeout=60_000)
                timing = page.evaluate(
                    "(() => { const n = performance.getEntriesByType('navigation')[0];"
                    " return [n.responseStart - n.requestStart, n.domContentLoadedEventEnd,"
                    " n.loadEventEnd, n.transferSize]; })()"
                )
                assert page.locator("svg.el").count() > 0, "the fleet page did not draw"
                if i:  # the first load warms the server's template and URL caches
                    runs.append(timing)
                elif screenshot is not None:
                    page.screenshot(path=str(screenshot))
                context.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    return (
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        statistics.median(r[2] for r in runs),
        statistics.median(r[3] for r in runs) / 1024,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="2,100,1000", help="rack counts, comma-separated")
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium figures")
    parser.add_argument("--screenshots", type=Path, help="save the Fleet at 2 and 100 racks here")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    banner(f"pages and API: server time and queries at {', '.join(map(str, sizes))} racks")
    print(f"# load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    import tempfile

    from bench.scale import build_scale_fabric

    # Production settings: hashed static files from collectstatic, like a real deployment.
    static_root = tempfile.mkdtemp(prefix="bench-static-")
    setup_django(fresh=True, STATIC_ROOT=static_root)
    from django.core.management import call_command

    call_command("collectstatic", verbosity=0, interactive=False)
    runs = {}
    browser: dict[int, tuple[float, float, float, float]] = {}
    for racks in sizes:
        if runs:
            reset()
        fabric = build_scale_fabric(racks=racks, live_domains=racks * 5)
        add_history()
        print(f"# {racks} racks: {fabric.trays} trays, {fabric.gpus} GPUs, "
              f"{fabric.live_domains} live domains")  # fmt: skip
        runs[racks] = measure(args.repeat)
        if not args.no_browser and Path(CHROMIUM).exists():
            shot = None
            if args.screenshots is not None and racks in (2, 100):
                args.screenshots.mkdir(parents=True, exist_ok=True)
                shot = args.screenshots / f"fleet-{racks}-racks.png"
            browser[racks] = chromium_fleet(args.repeat, shot)
    first = sizes[0]
    head = " ".join(f"{'ms@' + str(n):>9s}" for n in sizes[1:] or sizes)
    counts = " ".join(f"{'q@' + str(n):>7s}" for n in sizes)
    print(f"{'page':28s} {head} {counts} {'status':>6s} {'KiB':>7s} {'CPU ms':>7s}")
    grew = []
    for label in runs[first]:
        times = " ".join(f"{runs[n][label][0] * 1000:9.1f}" for n in sizes[1:] or sizes)
        queries = [runs[n][label][1] for n in sizes]
        if len(set(queries)) > 1:
            grew.append(label)
        _, _, status, size, cpu = runs[sizes[-1]][label]
        q_text = " ".join(f"{q:7d}" for q in queries)
        print(f"{label:28s} {times} {q_text} {status:6d} {size / 1024:7.1f} {cpu * 1000:7.1f}")
    print(f"query counts constant in the number of racks: {grew or 'yes'}")
    for racks, (server, interactive, load, kib) in browser.items():
        print(
            f"fleet page in Chromium at {racks} racks: interactive {interactive:.0f} ms "
            f"(server {server:.0f} ms of it), load {load:.0f} ms, {kib:.0f} KiB transferred "
            f"(median of {args.repeat})"
        )


def reset() -> None:
    """Empty every table for the next fabric size (keeps the migrated schema)."""
    from django.core.management import call_command

    call_command("flush", verbosity=0, interactive=False)


if __name__ == "__main__":
    main()
