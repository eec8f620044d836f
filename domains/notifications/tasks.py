"""Notification tasks: thin, idempotent (the unique key and the delivery claim make a
repeat harmless), retried with exponential backoff only when a delivery try failed."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from domains.errors import DATABASE_AWAY, retry_on
from domains.notifications import delivery, dispatch, health

# PostgreSQL away: try again shortly (docs/reliability.md); anything else is a bug.
DB_RETRY = retry_on(max_retries=8)


@shared_task(name="notifications.notify_event", **DB_RETRY)
def notify_event(event_id: int) -> int:
    """Match one recorded event against the subscriptions."""
    return dispatch.notify_event(event_id=event_id)


@shared_task(name="notifications.scan_ahead", **DB_RETRY)
def scan_ahead() -> int:
    """Leases ending soon and maintenance ahead, each told once (beat)."""
    return dispatch.scan_ahead()


@shared_task(
    name="notifications.deliver",
    bind=True,
    acks_late=True,
    max_retries=None,
    autoretry_for=DATABASE_AWAY,
    retry_backoff=1,
    retry_backoff_max=30,
)
def deliver(self: Any, notification_id: int) -> str:
    """Send one e-mail or webhook; a failed try is retried after base times 2^tries seconds."""
    try:
        return delivery.deliver(notification_id=notification_id)
    except delivery.DeliveryFailed as exc:
        base = settings.PORTAL["NOTIFY_BACKOFF_S"]
        raise self.retry(exc=exc, countdown=base * 2**self.request.retries) from exc


@shared_task(name="notifications.health_watch", **DB_RETRY)
def health_watch() -> str:
    """Read the portal's health and tell operators of a settled change (beat)."""
    alarm = health.health_watch()
    return alarm.seen if alarm is not None else "database away"
