"""The portal's health in one read (`portal_health`): ok, degraded or down, and why.

- **down**: this process cannot reach the database or Redis (the broker, the cache and the
  Channels layer). The web process's `/readyz` fails for the same two.
- **degraded**: the portal answers, but work waits or trays are cut off: no Celery worker
  has checked in for `workers.STALE_S` (placement, formation and releases wait), or trays'
  agents cannot talk to it: the portal answered their calls with a server error
  (`calls.failures`), or the agents themselves report that a call failed (`link_error` in
  their report: a timeout, a refused connection, an answer they could not use).

One tray's trouble degrades the condition without failing readiness: see portal/health.py.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from domains.health import calls, workers
from domains.inventory.models import Node, NodeState

OK, DEGRADED, DOWN = "ok", "degraded", "down"
TRAYS_NAMED = 20  # trays named in a reason, at most; the count says how many in all


@dataclass(frozen=True)
class Reason:
    part: str  # "database", "redis", "workers" or "agents"
    text: str  # one sentence an operator acts on
    trays: tuple[str, ...] = ()  # hostnames, for "agents"
    more: int = 0  # trays beyond those named


@dataclass(frozen=True)
class PortalHealth:
    status: str
    reasons: tuple[Reason, ...] = ()
    checked_at: datetime = field(default_factory=timezone.now)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def parts(self) -> list[str]:
        """The parts at fault, each once."""
        return list(dict.fromkeys(r.part for r in self.reasons))

    @property
    def trays(self) -> list[str]:
        return [t for r in self.reasons for t in r.trays]

    def summary(self) -> str:
        return "; ".join(r.text for r in self.reasons) or "all well"


def portal_health(
    *, now: datetime | None = None, database: bool | None = None, redis: bool | None = None
) -> PortalHealth:
    """The condition now. Never raises: a part that cannot be asked is a reason.
    `database`, `redis`: whether they answered the caller just now (not asked again)."""
    now = now or timezone.now()
    reasons: list[Reason] = []
    database = not database_error() if database is None else database
    if not database:
        reasons.append(Reason("database", "The database does not answer: nothing can change."))
    redis = not redis_error() if redis is None else redis
    if not redis:
        reasons.append(
            Reason(
                "redis",
                "Redis (the broker and cache) does not answer: nothing is queued for the "
                "workers, and pages are not live.",
            )
        )
    if redis:
        reasons += _workers()
    if database:
        reasons += _agents(now, redis=redis)
    down = any(r.part in ("database", "redis") for r in reasons)
    status = DOWN if down else DEGRADED if reasons else OK
    return PortalHealth(status, tuple(reasons), now)


def database_error() -> str:
    """Empty when the database answers now, else the error's class name."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return exc.__class__.__name__
    return ""


def redis_error() -> str:
    """Empty when Redis takes a write now, else the error's class name."""
    try:
        cache.set("health:probe", 1, 10)
    except Exception as exc:
        return exc.__class__.__name__
    return ""


def _workers() -> list[Reason]:
    try:
        seen = workers.last_worker()
    except Exception:
        return []  # Redis went away meanwhile: said above on the next read
    if seen is None:
        return [Reason("workers", "No Celery worker has checked in: placement, formation "
                       "and releases wait.")]  # fmt: skip
    silent = time.time() - seen.at
    if silent <= workers.STALE_S:
        return []
    return [
        Reason(
            "workers",
            f"No Celery worker has checked in for {_duration(silent)} (last: {seen.name}): "
            "placement, formation and releases wait.",
        )
    ]


def _agents(now: datetime, *, redis: bool) -> list[Reason]:
    """Trays whose agent calls the portal failed, and trays whose agents say a call failed."""
    failed = calls.failures(now=now, redis=redis)
    found = Node.objects.filter(pk__in=list(failed), gone=False).order_by()
    names = dict(found.values_list("pk", "hostname"))
    reasons = []
    if names:
        which = " and ".join(sorted({failed[pk].call for pk in names}))
        reasons.append(
            _trays_reason(
                sorted(names.values()),
                f"the portal failed {{its agent's|their agents'}} {which} calls "
                "(server errors; the web log has each one)",
            )
        )
    told = sorted(
        Node.objects.filter(gone=False, last_heartbeat__gte=now - _stale())
        .exclude(state=NodeState.DOWN)
        .filter(agent_report__has_key="link_error")
        .exclude(agent_report__link_error="")
        .order_by()  # sorted here: the default order would join the racks
        .values_list("hostname", flat=True)
    )
    if told:
        reasons.append(
            _trays_reason(
                told, "{its agent says its|their agents say their} calls to the portal fail"
            )
        )
    return reasons


def _trays_reason(hostnames: list[str], why: str) -> Reason:
    """ "1 tray: its agent says …" / "3 trays: their agents say …" (`why` holds
    `{one|many}` choices)."""
    n = len(hostnames)
    shown = hostnames[:TRAYS_NAMED]
    words = re.sub(r"\{([^|}]*)\|([^}]*)\}", r"\1" if n == 1 else r"\2", why)
    return Reason(
        "agents", f"{n} tray{'s' if n != 1 else ''}: {words}.", tuple(shown), n - len(shown)
    )


def _stale() -> timedelta:
    return settings.PORTAL["HEARTBEAT_STALE_AFTER"]


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h"
