"""From the audit trail to notifications: which subscriptions hear of an event, what they
are told, and the warnings about time that no event announces (a lease ending soon,
maintenance ahead), found by a beat pass.

Nothing is sent twice for one event: each subscription gets at most one `Notification` per
event key (a unique constraint), created before anything is sent. Nothing about another
namespace is sent: a subscription hears of an event only if its user may see the event's
namespace at that moment (and it is the subscription's namespace, when it names one).
New notifications are announced after commit (`signals.notification_created`); in-app ones
are delivered by being written, e-mail and webhooks by `delivery`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from domains import signals
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain, Phase
from domains.foresight.maintenance import affected_domains
from domains.inventory.models import MaintenanceWindow
from domains.notifications.models import Channel, Kind, Notification, Status, Subscription
from domains.signals import after_commit
from domains.tenancy.models import Namespace
from domains.tenancy.selectors import can_view_namespace, is_operator

# Audit verbs → the kind of notification they make.
VERB_KINDS = {
    "domain.ready": Kind.READY,
    "domain.recovered": Kind.READY,
    "domain.degraded": Kind.DEGRADED,
    "domain.failed": Kind.FAILED,
    "domain.awaiting_approval": Kind.APPROVAL_ASKED,
    "domain.approved": Kind.APPROVAL_DECIDED,
    "domain.denied": Kind.APPROVAL_DECIDED,
    "domain.maintenance_scheduled": Kind.MAINTENANCE,
    "domain.maintenance_cancelled": Kind.MAINTENANCE,
    "domain.tray_cordoned": Kind.TRAY_CORDONED,
    "domain.tray_draining": Kind.TRAY_CORDONED,
    # Uncordoned, marked up, its agent reporting again, or replaced by another tray.
    "domain.tray_back": Kind.TRAY_BACK,
    "domain.member_replaced": Kind.TRAY_BACK,
    # A placed domain that lost a tray and waits for one: whoever hears "Degraded" hears it.
    "domain.waiting_for_tray": Kind.DEGRADED,
    # An operator's note on the incident of a tray of the domain that is down: whoever hears
    # that the domain is Degraded hears what the operators say about it.
    "domain.incident_note": Kind.DEGRADED,
}


@dataclass(frozen=True)
class Message:
    """What a notification says, whatever the channel."""

    key: str
    kind: str
    namespace: Namespace | None  # None: about the whole portal, told to operators only
    domain: ComputeDomain | None
    title: str
    body: str
    payload: dict[str, Any]
    url: str


def notify_event(*, event_id: int) -> int:
    """Notify every subscription that wants this event; returns how many were created."""
    event = (
        Event.objects.select_related("namespace", "domain", "domain__namespace")
        .filter(pk=event_id)
        .first()
    )
    kind = VERB_KINDS.get(event.verb) if event is not None else None
    if event is None or kind is None or event.namespace is None:
        return 0
    return len(notify(_event_message(event, kind)))


def notify(message: Message) -> list[Notification]:
    """One notification per subscription that wants `message` and may see its namespace."""
    created = []
    for subscription in _listeners(message.kind, message.namespace):
        notification = _create(subscription, message)
        if notification is not None:
            created.append(notification)
    return created


def scan_ahead(*, now: datetime | None = None) -> int:
    """Warnings about time, each sent once: a lease ending within a subscription's
    `lease_warning_hours`, maintenance starting within its `maintenance_warning_hours`."""
    now = now or timezone.now()
    count = 0
    for message in _leases_ending(now):
        count += len(_notify_within(message, now, "lease_warning_hours"))
    for message in _maintenance_ahead(now):
        count += len(_notify_within(message, now, "maintenance_warning_hours"))
    return count


# --- who hears of it ----------------------------------------------------------------------


def _listeners(kind: str, namespace: Namespace | None) -> list[Subscription]:
    """Active subscriptions wanting `kind` whose user may see `namespace` now (operators,
    for news about the whole portal: `namespace` None)."""
    subscriptions = Subscription.objects.filter(active=True, user__is_active=True).select_related(
        "user"
    )
    seen: dict[int, bool] = {}
    wanted = []
    for sub in subscriptions:
        if kind not in sub.kinds:
            continue
        if namespace is not None and sub.namespace_id not in (None, namespace.pk):
            continue
        if sub.user_id not in seen:
            seen[sub.user_id] = (
                is_operator(sub.user)
                if namespace is None
                else can_view_namespace(sub.user, namespace)
            )
        if seen[sub.user_id]:
            wanted.append(sub)
    return wanted


def _notify_within(message: Message, now: datetime, hours_field: str) -> list[Notification]:
    """`notify`, for the subscriptions whose warning time the moment in `payload` is in."""
    when = datetime.fromisoformat(message.payload["at"])
    created = []
    for subscription in _listeners(message.kind, message.namespace):
        if when - now <= timedelta(hours=getattr(subscription, hours_field)):
            notification = _create(subscription, message)
            if notification is not None:
                created.append(notification)
    return created


def _create(subscription: Subscription, message: Message) -> Notification | None:
    """The notification, or None when this subscription already has one for the event."""
    if Notification.objects.filter(subscription=subscription, key=message.key).exists():
        return None
    in_app = subscription.channel == Channel.IN_APP
    try:
        with transaction.atomic():
            notification = Notification.objects.create(
                subscription=subscription,
                key=message.key,
                kind=message.kind,
                namespace=message.namespace,
                domain=message.domain,
                title=message.title[:200],
                body=message.body,
                payload=message.payload,
                url=message.url,
                status=Status.DELIVERED if in_app else Status.PENDING,
                delivered_at=timezone.now() if in_app else None,
            )
    except IntegrityError:
        return None  # a concurrent pass created it first: the constraint keeps it single
    ids = (notification.pk, subscription.channel, subscription.user_id)
    after_commit(
        signals.notification_created,
        Notification,
        notification_id=ids[0],
        channel=ids[1],
        user_id=ids[2],
    )
    return notification


# --- what they are told -------------------------------------------------------------------


def domain_url(domain: ComputeDomain) -> str:
    return f"/ns/{domain.namespace.name}/domains/{domain.uid}/"


def _event_message(event: Event, kind: str) -> Message:
    domain = event.domain
    assert event.namespace is not None  # checked by the caller
    name = f"{event.namespace.name}/{domain.name}" if domain else event.object_repr
    title = {
        Kind.READY: f"{name} is Ready",
        Kind.DEGRADED: f"{name} is Degraded",
        Kind.FAILED: f"{name} failed",
        Kind.APPROVAL_ASKED: f"{name} waits for an admin's approval",
        Kind.APPROVAL_DECIDED: f"{name} was {event.verb.rsplit('.', 1)[-1]}",
        Kind.MAINTENANCE: f"Maintenance for {name}"
        + (" called off" if event.verb.endswith("cancelled") else " scheduled"),
        Kind.TRAY_CORDONED: f"A tray of {name} is "
        + ("draining" if event.verb.endswith("draining") else "cordoned"),
        Kind.TRAY_BACK: f"A tray of {name} "
        + ("was replaced" if event.verb == "domain.member_replaced" else "is back in service"),
    }[Kind(kind)]
    body = event.message
    if event.verb == "domain.incident_note":
        title = f"Operators' note on {name}: a tray of it is down"
    elif event.verb == "domain.waiting_for_tray":
        title = f"{name} waits for a tray to replace one it lost"
    elif kind == Kind.DEGRADED and event.details.get("nodes"):
        body = f"trays not ready: {', '.join(event.details['nodes'])}; {event.message}"
    if kind == Kind.FAILED and domain is not None and domain.reason:
        body = f"{domain.reason}: {event.message}"
    return Message(
        key=f"event:{event.pk}",
        kind=kind,
        namespace=event.namespace,
        domain=domain,
        title=title,
        body=body,
        payload={
            "event": event.verb,
            "eventId": event.pk,
            "occurredAt": event.created_at.isoformat(),
            "details": event.details,
        },
        url=domain_url(domain) if domain else "",
    )


def _leases_ending(now: datetime) -> Iterable[Message]:
    horizon = now + timedelta(hours=max_hours("lease_warning_hours"))
    domains = ComputeDomain.objects.select_related("namespace").filter(
        phase__in=(Phase.READY, Phase.DEGRADED),
        lease_expires_at__gt=now,
        lease_expires_at__lte=horizon,
    )
    for domain in domains:
        assert domain.lease_expires_at is not None
        end = domain.lease_expires_at
        yield Message(
            key=f"lease:{domain.uid}:{end.isoformat()}",
            kind=Kind.LEASE_ENDING,
            namespace=domain.namespace,
            domain=domain,
            title=f"{domain} lease ends {end:%Y-%m-%d %H:%M} UTC",
            body=f"its trays are released then unless the lease is extended "
            f"({_until(end, now)} from now)",
            payload={"at": end.isoformat(), "event": "lease.ending"},
            url=domain_url(domain),
        )


def _maintenance_ahead(now: datetime) -> Iterable[Message]:
    horizon = now + timedelta(hours=max_hours("maintenance_warning_hours"))
    windows = MaintenanceWindow.objects.filter(
        cancelled_at__isnull=True, starts_at__gt=now, starts_at__lte=horizon
    ).prefetch_related("nodes")
    for window in windows:
        hits = affected_domains(window)
        domains = ComputeDomain.objects.select_related("namespace").filter(
            uid__in=[h.uid for h in hits]
        )
        trays = {h.uid: h.trays for h in hits}
        for domain in domains:
            yield Message(
                key=f"maintenance-ahead:{window.pk}:{domain.uid}",
                kind=Kind.MAINTENANCE,
                namespace=domain.namespace,
                domain=domain,
                title=f"Maintenance for {domain} starts {window.starts_at:%Y-%m-%d %H:%M} UTC",
                body=f"maintenance of {', '.join(trays[str(domain.uid)])} from "
                f"{window.starts_at:%Y-%m-%d %H:%M} to {window.ends_at:%Y-%m-%d %H:%M} UTC "
                f"({_until(window.starts_at, now)} from now): {window.reason}",
                payload={
                    "at": window.starts_at.isoformat(),
                    "event": "maintenance.ahead",
                    "window": window.pk,
                },
                url=domain_url(domain),
            )


def max_hours(field: str) -> int:
    """The longest warning time any active subscription asks for (0 when none)."""
    hours = Subscription.objects.filter(active=True).values_list(field, flat=True)
    return max(hours, default=0)


def _until(when: datetime, now: datetime) -> str:
    minutes = max(0, int((when - now).total_seconds() // 60))
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"
