"""The fleet's last hours or days (`RANGES`), from what the portal already records: GPUs
held by domains (each membership's `assigned_at` and `released_at`), the queue of requests
waiting for trays (each domain's `created_at` and the stamp that ended its wait), the 95th
percentile of formation time (placement → Ready, as `formation_seconds` counts it: what the
trays and the portal took) and, apart from it, of the approval wait (request → approved:
what an admin took).

Four queries whatever the fleet's size. The two levels are built from their changes:
PostgreSQL sums +n at each start and -n at each end per bucket, and the running sum here
gives the level at the end of each bucket, so the cost follows the rows of the last day,
not rows times buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from domains import sqlnames
from domains.computedomains.models import ApprovalState, ComputeDomain, DomainMember
from domains.inventory.models import Node

WINDOW = timedelta(hours=24)
# The ranges the Fleet page offers (the query's `range`), the default first.
RANGES = {"24h": timedelta(hours=24), "6h": timedelta(hours=6), "7d": timedelta(days=7)}
BUCKETS = 48  # a point every half hour over a day
P95_BUCKETS = 24  # a percentile per hour over a day: fewer formations fall in each bucket


@dataclass(frozen=True)
class Series:
    """Values at evenly spaced times ending now; None where nothing was recorded."""

    key: str
    name: str
    unit: str
    start: datetime
    step: timedelta
    values: tuple[float | None, ...]

    @property
    def last(self) -> float | None:
        return next((v for v in reversed(self.values) if v is not None), None)

    @property
    def peak(self) -> float | None:
        seen = [v for v in self.values if v is not None]
        return max(seen) if seen else None


@dataclass(frozen=True)
class Trends:
    gpus_used: Series
    queue_depth: Series
    formation_p95: Series
    approval_p95: Series
    window: timedelta = WINDOW

    @property
    def all(self) -> tuple[Series, ...]:
        return (self.gpus_used, self.queue_depth, self.formation_p95, self.approval_p95)


def fleet_trends(*, now: datetime | None = None, window: timedelta = WINDOW) -> Trends:
    now = now or timezone.now()
    start = now - window
    return Trends(
        gpus_used=Series(
            "gpus-used",
            "GPUs in use",
            "GPUs",
            start,
            window / BUCKETS,
            _level(_gpu_changes(), start, now),
        ),
        queue_depth=Series(
            "queue-depth",
            "Queue depth",
            "requests",
            start,
            window / BUCKETS,
            _level(_queue_changes(), start, now),
        ),
        formation_p95=Series(
            "formation-p95",
            "Formation p95 (placed → Ready)",
            "s",
            start,
            window / P95_BUCKETS,
            _p95("placed_at", "ready_at", start, now),
        ),
        approval_p95=Series(
            "approval-p95",
            "Approval wait p95",
            "s",
            start,
            window / P95_BUCKETS,
            _p95("created_at", "admitted_at", start, now, approved=True),
        ),
        window=window,
    )


def _gpu_changes() -> str:
    """A held tray adds its GPUs when assigned and takes them back when released (or, for a
    membership that ended without a release stamp, when its state last changed)."""
    m, n = DomainMember, Node
    t, c = sqlnames.table, sqlnames.column
    end = (
        f"CASE WHEN m.{c(m, 'active')} THEN NULL "
        f"ELSE COALESCE(m.{c(m, 'released_at')}, m.{c(m, 'state_changed_at')}) END"
    )
    began, gpus = c(m, "assigned_at"), c(n, "gpu_count")
    return (
        f"SELECT m.{began} AS began, {end} AS ended, n.{gpus} AS d "  # noqa: S608 - names
        f"FROM {t(m)} m JOIN {t(n)} n ON n.{c(n, 'id')} = m.{c(m, 'node')}"
    )


def _queue_changes() -> str:
    """A request waits from its creation until it is placed, ends or is released; one that
    follows its workload reserves nothing and never queues."""
    d, c = ComputeDomain, sqlnames.column
    stamps = ", ".join(
        f"{c(d, f)}" for f in ("placed_at", "ready_at", "failed_at", "release_requested_at")
    )
    began, released = c(d, "created_at"), c(d, "released_at")
    return (
        f"SELECT {began} AS began, COALESCE({stamps}, {released}) AS ended, "  # noqa: S608
        f"1 AS d FROM {sqlnames.table(d)} WHERE {c(d, 'num_nodes')} > 0"
    )


def _level(intervals: str, start: datetime, now: datetime) -> tuple[float | None, ...]:
    """The sum of `d` over the intervals open at the end of each bucket: intervals open at
    `start` land in bucket 0, starts and ends inside the window in theirs."""
    sql = f"""
        WITH spans AS ({intervals}),
        changes AS (
            SELECT GREATEST(began, %(start)s) AS at, d FROM spans
             WHERE began < %(now)s AND (ended IS NULL OR ended > %(start)s)
            UNION ALL
            SELECT ended, -d FROM spans WHERE ended > %(start)s AND ended <= %(now)s
        )
        SELECT LEAST(width_bucket(EXTRACT(EPOCH FROM at), %(s)s, %(e)s, %(n)s), %(n)s) AS b,
               SUM(d)
          FROM changes GROUP BY b
    """  # noqa: S608 - table and column names from the models, values bound
    bounds: dict[str, datetime | float] = {
        "start": start,
        "now": now,
        "s": start.timestamp(),
        "e": now.timestamp(),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, {**bounds, "n": BUCKETS})
        deltas = dict(cursor.fetchall())
    level, values = 0.0, []
    for bucket in range(1, BUCKETS + 1):
        level += float(deltas.get(bucket, 0))
        values.append(max(0.0, level))
    return tuple(values)


def _p95(
    began: str, ended: str, start: datetime, now: datetime, *, approved: bool = False
) -> tuple[float | None, ...]:
    """The 95th percentile of `ended - began` per bucket of `ended` (`approved`: of the
    domains an admin approved only: the others waited for nobody)."""
    d, c = ComputeDomain, sqlnames.column
    end, begin = c(d, ended), c(d, began)
    only = f" AND {c(d, 'approval_state')} = %(approved)s" if approved else ""
    sql = f"""
        SELECT LEAST(width_bucket(EXTRACT(EPOCH FROM {end}), %(s)s, %(e)s, %(n)s), %(n)s)
               AS b,
               percentile_cont(0.95) WITHIN GROUP
               (ORDER BY GREATEST(0, EXTRACT(EPOCH FROM {end} - {begin})))
          FROM {sqlnames.table(d)}
         WHERE {end} > %(start)s AND {end} <= %(now)s AND {begin} IS NOT NULL{only}
         GROUP BY b
    """  # noqa: S608 - table and column names from the models, values bound
    params: dict[str, datetime | float | str] = {
        "start": start,
        "now": now,
        "s": start.timestamp(),
        "e": now.timestamp(),
        "approved": ApprovalState.APPROVED,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, {**params, "n": P95_BUCKETS})
        by_bucket = {b: float(v) for b, v in cursor.fetchall()}
    return tuple(by_bucket.get(b) for b in range(1, P95_BUCKETS + 1))
