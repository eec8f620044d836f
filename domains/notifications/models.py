"""Subscriptions, the notifications they were sent (one per event and subscription: the
delivery log) and each delivery attempt."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from domains.computedomains.models import ComputeDomain
from domains.tenancy.models import Namespace


class Channel(models.TextChoices):
    IN_APP = "in_app", "In the portal"
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class Kind(models.TextChoices):
    READY = "domain.ready", "Domain Ready"
    DEGRADED = "domain.degraded", "Domain Degraded (which tray)"
    FAILED = "domain.failed", "Domain Failed (why)"
    LEASE_ENDING = "lease.ending", "Lease ending soon"
    APPROVAL_ASKED = "approval.asked", "Approval asked"
    APPROVAL_DECIDED = "approval.decided", "Approval decided"
    MAINTENANCE = "maintenance", "Maintenance scheduled, called off or ahead"
    TRAY_CORDONED = "domain.tray_cordoned", "A tray of the domain cordoned or draining"
    TRAY_BACK = "domain.tray_back", "A tray of the domain back in service, or replaced"
    PORTAL_HEALTH = "portal.health", "Portal degraded or down, and recovered (operators)"


class Status(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


def new_secret() -> str:
    return secrets.token_hex(32)


class Subscription(models.Model):
    """One person's wish to hear of some kinds of events, over one channel.

    Only events about namespaces the person may see at the moment of sending are sent
    (`namespace` narrows it to one of them). E-mail goes to `target` or the account's
    address; a webhook POSTs to `target`, signed with `secret` (HMAC-SHA256).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="subscriptions"
    )
    channel = models.CharField(max_length=8, choices=Channel.choices)
    target = models.CharField(max_length=500, blank=True, help_text="E-mail address or URL.")
    secret = models.CharField(max_length=64, default=new_secret, editable=False)
    kinds = models.JSONField(default=list, help_text="Kind values this subscription wants.")
    namespace = models.ForeignKey(
        Namespace, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    lease_warning_hours = models.PositiveSmallIntegerField(default=4)
    maintenance_warning_hours = models.PositiveSmallIntegerField(default=24)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.user} via {self.get_channel_display()} ({', '.join(self.kinds)})"


class Notification(models.Model):
    """What one subscription was sent about one event: at most one per event (the key)."""

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="notifications"
    )
    key = models.CharField(max_length=200, help_text="The event it is about, e.g. event:42.")
    kind = models.CharField(max_length=24, choices=Kind.choices)
    namespace = models.ForeignKey(
        Namespace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    domain = models.ForeignKey(
        ComputeDomain, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    payload = models.JSONField(default=dict)
    url = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Nothing is sent twice for one event: one row per (subscription, event).
            models.UniqueConstraint(fields=["subscription", "key"], name="notification_once"),
        ]
        indexes = [
            models.Index(fields=["subscription", "created_at"], name="notification_sub_time"),
            models.Index(fields=["status", "created_at"], name="notification_status_time"),
        ]

    def __str__(self) -> str:
        return f"{self.title} → {self.subscription}"


class DeliveryAttempt(models.Model):
    """One try at delivering a notification by e-mail or webhook (the delivery log)."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="delivery_attempts"
    )
    at = models.DateTimeField(auto_now_add=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"attempt at {self.at:%H:%M:%S}: {self.status_code or self.error}"


class HealthAlarm(models.Model):
    """The portal's health as operators were last told it (one row per condition): what
    was seen since when, and what was told when, so a flapping condition is told once."""

    key = models.CharField(max_length=40, unique=True)
    seen = models.CharField(max_length=10, help_text="ok, degraded or down, as last read.")
    seen_since = models.DateTimeField(help_text="Since when it is ok, or not ok.")
    told = models.CharField(max_length=10, default="ok", help_text="ok or bad, as last told.")
    told_at = models.DateTimeField(null=True, blank=True)
    reasons = models.JSONField(default=list, help_text="What was told, reason by reason.")

    def __str__(self) -> str:
        return f"{self.key}: seen {self.seen}, told {self.told}"
