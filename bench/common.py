"""Shared set-up for benchmarks: a dedicated PostgreSQL database and Django configured on it.

Every benchmark runs against BENCH_DATABASE_URL (default: database `portal_bench` on the
machine's PostgreSQL), which is dropped and re-created first, so figures never depend on
what an earlier run left behind.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/portal_bench"


def bench_database_url() -> str:
    """BENCH_DATABASE_URL, else `portal_bench` on DATABASE_URL's server (`make bench` and
    `python -m testbed.devservices -- …` set DATABASE_URL to a private one)."""
    if "BENCH_DATABASE_URL" in os.environ:
        return os.environ["BENCH_DATABASE_URL"]
    if "DATABASE_URL" in os.environ:
        return os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/portal_bench"
    return DEFAULT_URL


def recreate_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(*, fresh: bool = True, **env: str) -> str:
    """Point Django at the bench database, (re)create and migrate it; returns its URL."""
    url = bench_database_url()
    if fresh:
        recreate_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/8")
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "x" * 40)
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
    os.environ.setdefault("STATIC_ROOT", str(ROOT / "var" / "bench-static"))
    os.environ.update(env)
    import django
    from django.core.management import call_command

    django.setup()
    if fresh:
        call_command("migrate", verbosity=0, interactive=False)
    from portal.web.checks import missing_static_manifest

    if missing_static_manifest():  # production settings: servers refuse to start without
        call_command("collectstatic", verbosity=0, interactive=False)
    return url


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported p99 is a value we saw)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary_ms(values_s: list[float]) -> str:
    ms = [v * 1000 for v in values_s]
    return (
        f"median {statistics.median(ms):8.2f} ms  p95 {percentile(ms, 95):8.2f} ms  "
        f"max {max(ms):8.2f} ms  (n={len(ms)})"
    )


def stats(values: list[float]) -> str:
    """Median and p95 of durations in seconds, as milliseconds (formation, DRA)."""
    ms = [v * 1000 for v in values]
    return f"median {statistics.median(ms):7.0f} ms   p95 {percentile(ms, 95):7.0f} ms"


def wait(predicate, timeout: float, what: str, interval: float = 0.01) -> float:
    """Poll until true; returns the monotonic time it was first seen true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def load_average() -> str:
    """The machine's 1/5/15-minute load averages (other work on a shared machine skews
    every figure, so each is printed with the load it was measured under)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def banner(title: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpus = os.cpu_count()
    print(f"# {title}")
    print(f"# {now} · {platform.python_implementation()} {platform.python_version()} · {cpus} CPUs")
    print(f"# {load_average()}")
