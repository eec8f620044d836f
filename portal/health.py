"""Liveness and readiness for the web process."""

from __future__ import annotations

from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, JsonResponse

from domain_portal import __version__


def liveness(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok", "version": __version__})


def readiness(request: HttpRequest) -> JsonResponse:
    """503 when this process cannot do its work: the database or the broker (Redis) is away.

    One agent's errors (a tray that cannot fetch its desired state or report) do not fail it:
    the kubelet would take every web replica out of the Service for a fault that no replica
    can fix, and the other trays' agents and the tenants would lose the portal too. Those
    show on the Fleet and tray pages instead."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        cache.set("readyz", "1", 5)
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"error: {exc.__class__.__name__}"
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )
