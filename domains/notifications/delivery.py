"""Sending a notification by e-mail (Django's mail settings) or signed webhook.

A delivery is claimed by compare-and-set (pending → sending) before anything leaves, so
two workers never send one notification; a delivered one is never sent again. Each try is
logged (`DeliveryAttempt`): the owner reads the log. A failed try goes back to pending and
the task retries it with exponential backoff, up to PORTAL["NOTIFY_ATTEMPTS"] tries.

Webhooks are POSTed as JSON with
    X-Portal-Delivery: <notification id>        the same on every retry: receivers dedupe on it
    X-Portal-Event: <kind>
    X-Portal-Timestamp: <unix seconds>
    X-Portal-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the secret>
Any 2xx answer is delivered; anything else is a failed try: a receiver that does not accept
the connection within PORTAL_WEBHOOK_CONNECT_TIMEOUT_S (2 s) or answer within
PORTAL_WEBHOOK_TIMEOUT_S (5 s). A target (scheme, host and port) that failed
PORTAL_WEBHOOK_BREAKER_FAILURES tries in a row is not tried for PORTAL_WEBHOOK_BREAKER_OPEN_S
seconds: each delivery to it meanwhile is a failed try at once, without a connection, so a
receiver that never answers holds one worker thread for a few seconds, not one per delivery.
Deliveries run on the notifications' own Celery queue and worker (portal/celery.py), never
the controller's, so a tenant's webhooks never delay anyone's placement.

A subscription deleted while one of its notifications is being sent takes the notification
with it; the try is then written nowhere (the notification row is locked while the try is
written, and `subscription_delete` locks them all first).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.cache import cache
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from redis.exceptions import RedisError

from domains.notifications import egress
from domains.notifications.models import (
    Channel,
    DeliveryAttempt,
    Notification,
    Status,
)

SIGNATURE_HEADER = "X-Portal-Signature"


class DeliveryFailed(Exception):
    """This try failed; the task retries (with backoff) while tries are left."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of "<timestamp>.<body>" (receivers recompute it)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def webhook_body(notification: Notification) -> dict[str, Any]:
    domain = notification.domain
    return {
        "id": notification.pk,
        "kind": notification.kind,
        "title": notification.title,
        "body": notification.body,
        "namespace": notification.namespace.name if notification.namespace else None,
        "domain": {"name": domain.name, "uid": str(domain.uid)} if domain else None,
        "url": notification.url,
        "createdAt": notification.created_at.isoformat(),
        **notification.payload,
    }


def deliver(*, notification_id: int) -> str:
    """Try once to send it; returns its status. Raises DeliveryFailed when the try failed
    and more are allowed (the caller retries later)."""
    claimed = Notification.objects.filter(pk=notification_id, status=Status.PENDING).update(
        status=Status.SENDING, attempts=F("attempts") + 1
    )
    notification = (
        Notification.objects.select_related("subscription__user", "namespace", "domain")
        .filter(pk=notification_id)
        .first()
    )
    if notification is None:
        return "gone"
    if not claimed:
        return notification.status  # delivered, failed for good, or another worker has it
    started = time.monotonic()
    code, error = _send(notification)
    elapsed = int((time.monotonic() - started) * 1000)
    outcome = _record_try(notification, code, error, elapsed)
    if outcome == Status.PENDING:
        raise DeliveryFailed(error)
    return outcome


@transaction.atomic
def _record_try(notification: Notification, code: int | None, error: str, elapsed: int) -> str:
    """Log the try and settle the notification; "gone" if it was deleted meanwhile."""
    locked = Notification.objects.select_for_update().filter(pk=notification.pk)
    if locked.values_list("pk", flat=True).first() is None:
        return "gone"  # its subscription was deleted while it was being sent
    DeliveryAttempt.objects.create(
        notification=notification, status_code=code, error=error[:500], duration_ms=elapsed
    )
    if not error:
        Notification.objects.filter(pk=notification.pk).update(
            status=Status.DELIVERED, delivered_at=timezone.now(), last_error=""
        )
        return Status.DELIVERED
    last = notification.attempts >= settings.PORTAL["NOTIFY_ATTEMPTS"]
    status = Status.FAILED if last else Status.PENDING
    Notification.objects.filter(pk=notification.pk).update(status=status, last_error=error[:500])
    return status


def _send(notification: Notification) -> tuple[int | None, str]:
    """(HTTP status or None, error text or "")."""
    channel = notification.subscription.channel
    if channel == Channel.EMAIL:
        return _email(notification)
    if channel == Channel.WEBHOOK:
        return _webhook(notification)
    return None, ""  # in-app: delivered by being written


def _email(notification: Notification) -> tuple[int | None, str]:
    subscription = notification.subscription
    to = subscription.target or subscription.user.email
    base = settings.PORTAL["BASE_URL"].rstrip("/")
    link = f"\n\n{base}{notification.url}" if base and notification.url else ""
    try:
        send_mail(
            subject=f"[Domain Portal] {notification.title}",
            message=f"{notification.body}{link}\n\n(You subscribed to these on the portal's "
            "Notifications page.)",
            from_email=None,
            recipient_list=[to],
        )
    except Exception as exc:  # any SMTP or backend trouble is a failed try, logged
        return None, f"{type(exc).__name__}: {exc}"
    return None, ""


def _webhook(notification: Notification) -> tuple[int | None, str]:
    subscription = notification.subscription
    body = json.dumps(webhook_body(notification), separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "domain-portal-webhooks",
        "X-Portal-Delivery": str(notification.pk),
        "X-Portal-Event": notification.kind,
        "X-Portal-Timestamp": timestamp,
        SIGNATURE_HEADER: sign(subscription.secret, timestamp, body),
    }
    try:
        target = egress.pin(subscription.target)
    except egress.EgressRefused as exc:
        return None, f"refused: {exc}"
    headers["Host"] = target.host
    breaker = Breaker(subscription.target)
    if breaker.open():
        return None, f"not tried: {breaker.origin} failed {breaker.failures} tries in a row"
    code, error = _post(target, body, headers)
    breaker.record(ok=not error)
    return code, error


def _post(
    target: egress.PinnedTarget, body: bytes, headers: dict[str, str]
) -> tuple[int | None, str]:
    portal = settings.PORTAL
    timeout = httpx.Timeout(
        portal["WEBHOOK_TIMEOUT_S"], connect=portal["WEBHOOK_CONNECT_TIMEOUT_S"]
    )
    try:
        with httpx.Client(timeout=timeout) as client:
            response = client.post(
                target.url,
                content=body,
                headers=headers,
                extensions={"sni_hostname": target.server_name},
            )
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"answered {response.status_code}"


class Breaker:
    """The circuit breaker of one webhook target (scheme, host and port), kept in the shared
    cache: failures in a row, and whether it is open (not tried until the key expires).
    With the cache away it counts nothing and is never open."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        digest = hashlib.sha256(self.origin.encode()).hexdigest()[:32]
        self._count, self._open = f"webhook-fails:{digest}", f"webhook-open:{digest}"
        self.failures = 0

    def open(self) -> bool:
        try:
            self.failures = int(cache.get(self._open) or 0)
        except (RedisError, OSError, ValueError):  # Redis away: deliver as if no breaker
            return False
        return self.failures > 0

    def record(self, *, ok: bool) -> None:
        portal = settings.PORTAL
        try:
            if ok:
                cache.delete(self._count)
                return
            cache.add(self._count, 0, timeout=portal["WEBHOOK_BREAKER_OPEN_S"] * 10)
            failures = int(cache.incr(self._count))
            if failures >= portal["WEBHOOK_BREAKER_FAILURES"]:
                cache.set(self._open, failures, timeout=portal["WEBHOOK_BREAKER_OPEN_S"])
                cache.delete(self._count)
        except (RedisError, OSError, ValueError):  # Redis away: the breaker forgets
            return
