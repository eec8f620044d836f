"""Server-side failures of the agent API, per tray: what the portal answered an agent with
a 5xx, when, and why, where the health condition and the tray page can read it.

Kept in the cache (Redis), not in the database: the failure may be the database's (a lost
connection, a broken statement, a lock that timed out), and a write there would fail with
the request it means to record. Each failure is also kept in this process's memory, so that
with Redis away too this web process's own pages still say what failed. Nothing is cleared
on success: an entry counts as current for `CURRENT_S` after the tray's last failure, longer
than an agent waits between two tries (its longest backoff, 10 s, and its desired-state poll).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.utils import timezone

from domains.signals import node_changed, send_logged

log = logging.getLogger(__name__)

# A failure counts as current this long after the tray's last one.
CURRENT_S = float(os.environ.get("PORTAL_AGENT_FAILURE_CURRENT_S", 60))
KEPT_S = 3600  # how long the cache keeps a tray's last failure (the tray page shows it)
INDEX_KEY = "health:agent-failures"
LOCAL_MAX = 2000  # entries kept in memory when Redis is away, at most

_local: dict[int, dict[str, Any]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class CallFailure:
    """The portal's last 5xx answer to one tray's agent."""

    node_id: int
    call: str  # "desired state", "status report", "facts", "claim", "claim release"
    status: int  # the HTTP status answered
    error: str  # the exception's class and first line
    at: datetime  # the last failure
    since: datetime  # the first of this run of failures
    count: int  # failures in this run

    def current(self, now: datetime) -> bool:
        return now - self.at <= timedelta(seconds=CURRENT_S)

    @property
    def text(self) -> str:
        """One line: "desired state: HTTP 500 (ProgrammingError: column … does not exist)"."""
        return f"{self.call}: HTTP {self.status} ({self.error})"


def _key(node_id: int) -> str:
    return f"health:agent-failure:{node_id}"


def describe(exc: BaseException) -> str:
    """The exception's class and the first line of its message, short."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{exc.__class__.__name__}: {first}"[:300] if first else exc.__class__.__name__


def agent_call_failed(*, node_id: int, call: str, status: int, exc: BaseException) -> None:
    """Record that the portal answered `call` of tray `node_id`'s (authenticated) agent with
    `status` (5xx) because of `exc`. Never raises: it runs while a request is failing."""
    now = timezone.now()
    try:
        _record(node_id, call, status, describe(exc), now)
    except Exception:  # recording must not turn one failure into another
        log.exception("could not record the failure of %s for tray %s", call, node_id)


def _record(node_id: int, call: str, status: int, error: str, now: datetime) -> None:
    with _lock:
        previous = _local.get(node_id)
    try:
        previous = cache.get(_key(node_id)) or previous
        cached = True
    except Exception:  # Redis away: this process's memory only
        cached = False
    last = _failure(node_id, previous) if previous else None
    fresh = last is None or not last.current(now)
    entry = {
        "call": call,
        "status": status,
        "error": error,
        "at": now.isoformat(),
        "since": now.isoformat() if fresh or last is None else last.since.isoformat(),
        "count": 1 if fresh or last is None else last.count + 1,
    }
    with _lock:
        _local[node_id] = entry
        while len(_local) > LOCAL_MAX:
            _local.pop(next(iter(_local)))
    if cached:
        try:
            cache.set(_key(node_id), entry, KEPT_S)
            # The trays with a failure, read by `failures`. Two trays failing at once may
            # each write the list without the other: the next failure adds it back.
            index = cache.get(INDEX_KEY) or []
            if node_id not in index:
                cache.set(INDEX_KEY, [*index, node_id], KEPT_S)
        except Exception:
            log.warning("could not keep the failure of %s for tray %s in Redis", call, node_id)
    if fresh:  # the pages that show the tray fetch again, and find the failure
        send_logged(node_changed, node_ids=[node_id])


def _failure(node_id: int, entry: dict[str, Any]) -> CallFailure:
    return CallFailure(
        node_id=node_id,
        call=str(entry["call"]),
        status=int(entry["status"]),
        error=str(entry["error"]),
        at=datetime.fromisoformat(entry["at"]),
        since=datetime.fromisoformat(entry["since"]),
        count=int(entry["count"]),
    )


def failures(*, now: datetime | None = None, redis: bool = True) -> dict[int, CallFailure]:
    """Every tray's current failure (tray id → its last one). `redis=False`: only what this
    process saw (Redis is known to be away: every read would wait for its timeout)."""
    now = now or timezone.now()
    with _lock:
        entries = dict(_local)
    if redis:
        try:
            index = cache.get(INDEX_KEY) or []
            found = cache.get_many([_key(i) for i in index])
        except Exception:  # Redis went away meanwhile: what this process saw
            index, found = [], {}
        for node_id in index:
            entry = found.get(_key(node_id))
            if entry and entry["at"] >= entries.get(node_id, {}).get("at", ""):
                entries[node_id] = entry
    every = (_failure(node_id, entry) for node_id, entry in entries.items())
    return {f.node_id: f for f in every if f.current(now)}


def failure_of(node_id: int) -> CallFailure | None:
    """The tray's last failure, current or not (the tray page says when it was)."""
    with _lock:
        entry = _local.get(node_id)
    with contextlib.suppress(Exception):  # Redis away: what this process saw
        entry = cache.get(_key(node_id)) or entry
    return _failure(node_id, entry) if entry else None


def forget_local() -> None:
    """Drop what this process remembers (tests)."""
    with _lock:
        _local.clear()
