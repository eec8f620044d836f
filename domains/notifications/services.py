"""Writes to notifications: subscribe, unsubscribe, mark read. The caller is the owner;
errors name the field."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlparse

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from domains.errors import InvalidInput, QuotaExceeded
from domains.notifications import egress
from domains.notifications.models import Channel, Kind, Notification, Subscription
from domains.tenancy.models import Namespace
from domains.tenancy.selectors import namespaces_visible_to

MAX_WARNING_HOURS = 24 * 14


def subscription_create(
    *,
    user: User,
    channel: str,
    kinds: Sequence[str],
    target: str = "",
    namespace: str = "",
    lease_warning_hours: int = 4,
    maintenance_warning_hours: int = 24,
) -> Subscription:
    """A new subscription of `user` (the caller) to some kinds of events."""
    if channel not in Channel.values:
        raise InvalidInput(f"must be one of {', '.join(Channel.values)}", field="channel")
    wanted = list(dict.fromkeys(kinds))
    if not wanted or any(k not in Kind.values for k in wanted):
        raise InvalidInput(f"name one or more of {', '.join(Kind.values)}", field="kinds")
    target = _clean_target(user, channel, (target or "").strip())
    for field, hours in (
        ("lease_warning_hours", lease_warning_hours),
        ("maintenance_warning_hours", maintenance_warning_hours),
    ):
        if (
            isinstance(hours, bool)
            or not isinstance(hours, int)
            or not 1 <= hours <= MAX_WARNING_HOURS
        ):
            raise InvalidInput(f"must be between 1 and {MAX_WARNING_HOURS} hours", field=field)
    scope = None
    if namespace:
        scope = namespaces_visible_to(user).filter(name=namespace).first()
        if scope is None:
            raise InvalidInput(f"no namespace {namespace!r} you may see", field="namespace")
    with transaction.atomic():
        _check_caps(user, scope)
        return Subscription.objects.create(
            user=user,
            channel=channel,
            kinds=wanted,
            target=target,
            namespace=scope,
            lease_warning_hours=lease_warning_hours,
            maintenance_warning_hours=maintenance_warning_hours,
        )


def _check_caps(user: User, namespace: Namespace | None) -> None:
    """At most SUBSCRIPTIONS_PER_USER per user and SUBSCRIPTIONS_PER_NAMESPACE per namespace:
    each subscription costs a match per event and maybe a delivery. The user's row (and the
    namespace's) is locked, so two creates at once cannot both take the last place."""
    User.objects.select_for_update().get(pk=user.pk)
    per_user = settings.PORTAL["SUBSCRIPTIONS_PER_USER"]
    if Subscription.objects.filter(user=user).count() >= per_user:
        raise QuotaExceeded(
            f"you have {per_user} subscriptions, the most one user may have: delete one first"
        )
    if namespace is None:
        return
    Namespace.objects.select_for_update().get(pk=namespace.pk)
    per_namespace = settings.PORTAL["SUBSCRIPTIONS_PER_NAMESPACE"]
    if Subscription.objects.filter(namespace=namespace).count() >= per_namespace:
        raise QuotaExceeded(
            f"namespace {namespace.name} has {per_namespace} subscriptions, the most one "
            "namespace may have",
            field="namespace",
        )


@transaction.atomic
def subscription_delete(*, subscription: Subscription) -> None:
    """Stop it; its delivery log goes with it. Its notifications are locked first: a
    delivery under way finishes writing its try (or finds the notification gone) rather
    than leaving a try of a deleted notification behind."""
    list(Notification.objects.select_for_update().filter(subscription=subscription).values("pk"))
    subscription.delete()


def notifications_mark_read(*, user: User, ids: Sequence[int] | None = None) -> int:
    """Mark the user's own in-app notifications read (all when `ids` is None)."""
    with transaction.atomic():
        qs = Notification.objects.filter(
            subscription__user=user, subscription__channel=Channel.IN_APP, read_at__isnull=True
        )
        if ids is not None:
            qs = qs.filter(pk__in=list(ids))
        return qs.update(read_at=timezone.now())


def _clean_target(user: User, channel: str, target: str) -> str:
    if channel == Channel.IN_APP:
        if target:
            raise InvalidInput("in-app notifications have no target", field="target")
        return ""
    if channel == Channel.EMAIL:
        address = target or user.email
        if not address:
            raise InvalidInput("give an address (your account has none)", field="target")
        try:
            validate_email(address)
        except ValidationError:
            raise InvalidInput("must be an e-mail address", field="target")
        return target
    url = urlparse(target)
    if url.scheme not in ("http", "https") or not url.netloc or len(target) > 500:
        raise InvalidInput("must be an http(s) URL", field="target")
    try:
        egress.pin(target)
    except egress.EgressRefused as exc:
        raise InvalidInput(str(exc), field="target")
    return target
