"""Reads of notifications: always the caller's own, never anybody else's."""

from __future__ import annotations

from django.db.models import QuerySet

from domains.errors import NotFound
from domains.notifications.models import Channel, Notification, Subscription
from domains.tenancy.selectors import Viewer


def subscriptions_of(user: Viewer) -> QuerySet[Subscription]:
    if not user.is_authenticated:
        return Subscription.objects.none()
    return Subscription.objects.filter(user=user).select_related("namespace").order_by("id")


def subscription_of(user: Viewer, pk: int) -> Subscription:
    """The caller's own subscription; NotFound for anyone else's (ids do not leak)."""
    found = subscriptions_of(user).filter(pk=pk).first()
    if found is None:
        raise NotFound(f"no subscription {pk}")
    return found


def inbox_of(user: Viewer) -> QuerySet[Notification]:
    """The caller's in-app notifications, newest first."""
    if not user.is_authenticated:
        return Notification.objects.none()
    return Notification.objects.filter(
        subscription__user=user, subscription__channel=Channel.IN_APP
    ).select_related("namespace", "domain")


def unread_count(user: Viewer) -> int:
    return inbox_of(user).filter(read_at__isnull=True).count() if user.is_authenticated else 0


def delivery_log(subscription: Subscription) -> QuerySet[Notification]:
    """A subscription's delivery log, newest first: its notifications with their attempts."""
    return subscription.notifications.prefetch_related("delivery_attempts").order_by(
        "-created_at", "-id"
    )


def deliveries_of(subscription: Subscription, limit: int = 50) -> list[Notification]:
    """The latest `limit` entries of a subscription's delivery log."""
    return list(delivery_log(subscription)[:limit])
