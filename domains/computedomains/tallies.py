"""Figures of the lifecycle counted when they happen, for /metrics.

A scrape used to rebuild the formation and release histograms from every domain and every
member-ready event there ever was: 3.2 s at 50,000 finished domains (bench/metrics.py),
growing without bound. Instead each transition adds its observation here, in the
transaction that makes it, and a scrape reads a fixed number of rows however long the
history. A histogram is one row per bucket (`le`, +Inf included) with its cumulative
count; an observation adds 1 to the count of every bucket at or above it in one UPDATE,
and its value to their `total` (the +Inf row's total is the histogram's sum). A counter
is one +Inf row. Each figure only grows, as Prometheus expects of counters and histograms.

What is observed, and where (every phase change goes through `phases.transition`, which
adds its figures by the event that names it):
  formation_seconds        placed → Ready (not the wait      domain.ready
                           for an admin: `admitted` below)
  formation_step_seconds   admitted: request → admitted      services (request), domain.approved
                           placed: admitted → placed         domain.placed
                           tray_ready: placed → each tray's last ready report, and
                           ready: the last tray's → Ready    domain.ready
  release_seconds          release requested → Released      domain.released
  domains_ended            by namespace and phase            any change to Released or Failed
  domains_failed           by namespace, denials left out    any change to Failed
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection
from django.db.models import F

from domains import sqlnames
from domains.computedomains.models import Tally

INF = math.inf
# Request → Ready and release: seconds to minutes (the formation deadline defaults to 300 s).
DURATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 600)
# Steps of formation: the portal's own steps take milliseconds, a tray's IMEX seconds.
STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 600)

FORMATION = "formation_seconds"
FORMATION_STEP = "formation_step_seconds"
RELEASE = "release_seconds"
ENDED = "domains_ended"
FAILED = "domains_failed"
BUCKETS = {FORMATION: DURATION_BUCKETS, FORMATION_STEP: STEP_BUCKETS, RELEASE: DURATION_BUCKETS}


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """end - start in seconds, never below zero (two stamps of one step can come out a hair
    apart in the wrong order: `created_at` is taken at INSERT, after a service's `now`);
    None when either is missing."""
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def observe(series: str, values: Iterable[float | None], *, label: str = "") -> None:
    """Add observations to a histogram, in one UPDATE of its bucket rows."""
    seen = sorted(v for v in values if v is not None)
    if not seen:
        return
    bounds = BUCKETS[series]
    if not _add(series, label, seen):
        _create(series, label, (*bounds, INF))
        _add(series, label, seen)


# Each bucket's count grows by the observations at or below its bound; every row's total by
# their sum (only the +Inf row's total is read: the histogram's sum). Written by hand: the
# same UPDATE built by the ORM, a CASE of one WHEN per bucket, costs more to compile than
# the rest of a fold on the worker, and it runs three times per formation.
_ADD_SQL = (
    "UPDATE {table} SET {count} = {count} + (SELECT count(*) FROM unnest(%s::float8[]) AS v"
    " WHERE v <= {le}), {total} = {total} + %s WHERE {series} = %s AND {label} = %s"
)


def _add(series: str, label: str, seen: list[float]) -> int:
    """Add the observations to the histogram's rows; how many rows there were."""
    columns = {f.name: sqlnames.column(Tally, f.name) for f in Tally._meta.concrete_fields}
    sql = _ADD_SQL.format(table=sqlnames.table(Tally), **columns)
    with connection.cursor() as cursor:
        cursor.execute(sql, [[float(v) for v in seen], float(sum(seen)), series, label])
        return int(cursor.rowcount)


def count(series: str, *, label: str = "", by: int = 1) -> None:
    """Add to a counter."""
    rows = Tally.objects.filter(series=series, label=label, le=INF)
    if not rows.update(count=F("count") + by):
        _create(series, label, (INF,))
        rows.update(count=F("count") + by)


def _create(series: str, label: str, bounds: Sequence[float]) -> None:
    """A series' rows, at zero (a concurrent first observation may have made them)."""
    Tally.objects.bulk_create(
        [Tally(series=series, label=label, le=b) for b in bounds], ignore_conflicts=True
    )


def histograms(series: str) -> dict[str, tuple[list[tuple[float, int]], float]]:
    """label → (cumulative (bound, count) pairs, +Inf last; the sum) of one histogram."""
    out: dict[str, tuple[list[tuple[float, int]], float]] = {}
    rows = Tally.objects.filter(series=series).order_by("label", "le")
    for label, le, n, total in rows.values_list("label", "le", "count", "total"):
        buckets, _ = out.setdefault(label, ([], 0.0))
        buckets.append((le, n))
        if le == INF:
            out[label] = (buckets, total)
    return out


def counters(series: str) -> dict[str, int]:
    """label → count of one counter."""
    return dict(Tally.objects.filter(series=series, le=INF).values_list("label", "count"))
