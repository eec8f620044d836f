"""Liveness and readiness for the web process."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from django.http import HttpRequest, JsonResponse

from domain_portal import __version__
from domains.health.condition import PortalHealth, database_error, portal_health, redis_error
from domains.notifications.health import health_watch

log = logging.getLogger(__name__)

# How often one web process reads the portal's health from its probe (and tells operators of
# a settled change): at most once per this many seconds, whatever the probe's period.
WATCH_EVERY_S = float(os.environ.get("PORTAL_HEALTH_PROBE_WATCH_S", 15))


def liveness(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok", "version": __version__})


def readiness(request: HttpRequest) -> JsonResponse:
    """503 when this process cannot do its work: the database or the broker (Redis) is away.

    Everything else degrades the portal's health condition (domains/health/condition.py)
    without failing readiness: no Celery worker running, trays whose agents' calls fail
    (their desired state, their reports) or whose agents say their link fails. Those show in
    a banner on the Fleet and tray pages and are told to operators who subscribed to
    "portal.health". One agent's errors do not fail it: the kubelet would take every web
    replica out of the Service for a fault that no replica can fix, and the other trays'
    agents and the tenants would lose the portal too. Nor do the workers: a web replica
    taken out of the Service does not bring a worker back, and tenants could no longer even
    read their domains.

    The answer carries the condition as this process last read it (`health`: its status and
    the parts at fault, no tray names: the probe needs no credentials). Reading it, at most
    once per WATCH_EVERY_S, is also this process's turn at watching it (`health_watch`): with
    the workers or the broker away, no periodic task runs, and the web processes are what
    notice.
    """
    errors = {"database": database_error(), "redis": redis_error()}
    checks = {part: f"error: {error}" if error else "ok" for part, error in errors.items()}
    ready = all(v == "ok" for v in checks.values())
    body: dict[str, Any] = {"status": "ok" if ready else "unavailable", "checks": checks}
    health = _watch.now_and_then(database=checks["database"] == "ok", redis=checks["redis"] == "ok")
    if health is not None:
        body["health"] = {"status": health.status, "parts": health.parts}
    return JsonResponse(body, status=200 if ready else 503)


class _ProbeWatch:
    """The portal's health as this process last read it, read again when it is old."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read_at = 0.0
        self.last: PortalHealth | None = None

    def now_and_then(self, *, database: bool, redis: bool) -> PortalHealth | None:
        if not self.lock.acquire(blocking=False):
            return self.last  # another probe is reading it
        try:
            if time.monotonic() - self.read_at >= WATCH_EVERY_S:
                self.read_at = time.monotonic()
                self.last = portal_health(database=database, redis=redis)
                try:
                    health_watch(health=self.last)
                except Exception:  # telling operators must never fail the probe
                    log.exception("could not watch the portal's health")
            return self.last
        finally:
            self.lock.release()


_watch = _ProbeWatch()
