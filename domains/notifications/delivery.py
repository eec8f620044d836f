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
Any 2xx answer is delivered; anything else (or no answer within 10 s) is a failed try.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F
from django.utils import timezone

from domains.notifications import egress
from domains.notifications.models import (
    Channel,
    DeliveryAttempt,
    Notification,
    Status,
)

WEBHOOK_TIMEOUT_S = 10.0
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
    DeliveryAttempt.objects.create(
        notification=notification, status_code=code, error=error[:500], duration_ms=elapsed
    )
    if not error:
        Notification.objects.filter(pk=notification.pk).update(
            status=Status.DELIVERED, delivered_at=timezone.now(), last_error=""
        )
        return Status.DELIVERED
    last = notification.attempts >= settings.PORTAL["NOTIFY_ATTEMPTS"]
    Notification.objects.filter(pk=notification.pk).update(
        status=Status.FAILED if last else Status.PENDING, last_error=error[:500]
    )
    if last:
        return Status.FAILED
    raise DeliveryFailed(error)


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
    try:
        with httpx.Client(timeout=WEBHOOK_TIMEOUT_S) as client:
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
