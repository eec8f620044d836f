"""Whether Celery workers are alive: each worker stamps the cache every few seconds from its
own timer (portal/worker_health.py), and the condition reads the latest stamp.

A stamp rather than `celery inspect ping`: a ping is a broadcast over the broker and a wait
for the replies (a second or more) on every read of the condition, which the Fleet page
makes on every refresh; a stamp is one cache read.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from django.core.cache import cache

KEY = "health:worker-seen"
# A worker stamps every 5 s; silent this long, none is taken to be running.
STALE_S = float(os.environ.get("PORTAL_WORKER_STALE_S", 30))


@dataclass(frozen=True)
class WorkerSeen:
    name: str  # the worker's hostname (celery@host)
    at: float  # its stamp, seconds since the epoch


def worker_seen(name: str) -> None:
    """A worker says it is alive (raises when Redis is away: the caller decides)."""
    cache.set(KEY, {"name": name, "at": time.time()}, 24 * 3600)


def last_worker() -> WorkerSeen | None:
    """The latest stamp of any worker (raises when Redis is away)."""
    found = cache.get(KEY)
    return WorkerSeen(str(found["name"]), float(found["at"])) if found else None
