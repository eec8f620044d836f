"""Operators told when the portal's health turns bad and when it recovers, once each way.

`health_watch` reads the condition (`domains.health.condition`) and compares it with the
one row that says what was seen since when and what operators were last told
(`HealthAlarm`). A change is told only once it has lasted `SETTLE_S` (a restart of a worker
or a Redis blip is not news), and two notices are at least `GAP_S` apart (a condition
flapping every minute is told once, then again when it has settled). Who tells is decided by
compare-and-set on the row: the beat's task and every web process's probe may watch at once,
and one of them tells.

It runs on a worker every few seconds (beat) and, throttled, in each web process's
`/readyz` (portal/health.py): with the workers or the broker away, no task runs, and the web
processes are the ones that notice. The database away cannot be told this way (notifications
are rows in it): `/readyz` fails, and the portal's alerts (deploy/) say it.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from domains.health.condition import OK, PortalHealth, portal_health
from domains.notifications.dispatch import Message, notify
from domains.notifications.models import HealthAlarm, Kind

KEY = "portal"
SETTLE_S = float(os.environ.get("PORTAL_HEALTH_SETTLE_S", 30))
GAP_S = float(os.environ.get("PORTAL_HEALTH_GAP_S", 120))
BAD, GOOD = "bad", "ok"


def health_watch(
    *, now: datetime | None = None, health: PortalHealth | None = None
) -> HealthAlarm | None:
    """Read the condition (unless given) and tell operators of a settled change; returns the
    row as it now stands, or None when the database cannot be asked."""
    now = now or timezone.now()
    health = health or portal_health(now=now)
    if "database" in health.parts:
        return None
    alarm, _ = HealthAlarm.objects.get_or_create(
        key=KEY, defaults={"seen": health.status, "seen_since": now}
    )
    if (health.status == OK) != (alarm.seen == OK):
        HealthAlarm.objects.filter(pk=alarm.pk, seen=alarm.seen).update(
            seen=health.status, seen_since=now
        )
        alarm.seen, alarm.seen_since = health.status, now
    elif health.status != alarm.seen:  # degraded ↔ down: still bad, since when it turned
        HealthAlarm.objects.filter(pk=alarm.pk).update(seen=health.status)
        alarm.seen = health.status
    _tell(alarm, health, now)
    return alarm


def _tell(alarm: HealthAlarm, health: PortalHealth, now: datetime) -> None:
    want = GOOD if health.ok else BAD
    if want == alarm.told or now - alarm.seen_since < timedelta(seconds=SETTLE_S):
        return
    if alarm.told_at is not None and now - alarm.told_at < timedelta(seconds=GAP_S):
        return
    won = HealthAlarm.objects.filter(pk=alarm.pk, told=alarm.told).update(
        told=want, told_at=now, reasons=_reasons(health)
    )
    if won != 1:
        return  # another process told it
    alarm.told, alarm.told_at = want, now
    notify(_message(health, want, alarm.seen_since, now))


def _message(health: PortalHealth, want: str, since: datetime, now: datetime) -> Message:
    if want == BAD:
        title = f"Portal {health.status}: " + ", ".join(_PARTS.get(p, p) for p in health.parts)
        body = health.summary()
    else:
        title = "Portal health recovered"
        body = f"All well since {since:%Y-%m-%d %H:%M:%S} UTC."
    payload = {
        "event": f"portal.health.{health.status}",
        "status": health.status,
        "occurredAt": now.isoformat(),
        "reasons": _reasons(health),
    }
    return Message(
        key=f"health:{KEY}:{want}:{now.isoformat()}",
        kind=Kind.PORTAL_HEALTH,
        namespace=None,
        domain=None,
        title=title,
        body=body,
        payload=payload,
        url="/fabric/",
    )


def _reasons(health: PortalHealth) -> list[dict[str, Any]]:
    return [{"part": r.part, "text": r.text, "trays": list(r.trays)} for r in health.reasons]


_PARTS = {
    "database": "the database",
    "redis": "Redis",
    "workers": "no Celery worker",
    "agents": "trays' agents cannot reach it",
}
