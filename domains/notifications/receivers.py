"""What notifications listen to (connected by `apps.ready()`): every recorded event (after
commit) is matched on a worker; every new e-mail or webhook notification is sent on one."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from domains import signals
from domains.notifications.dispatch import VERB_KINDS
from domains.notifications.models import Channel
from domains.notifications.tasks import deliver, notify_event


@receiver(signals.event_recorded, dispatch_uid="notifications.event_recorded")
def event_recorded(
    sender: object, event_id: int, namespace_id: int | None = None, verb: str = "", **kw: Any
) -> None:
    """Only the verbs someone can subscribe to, in a namespace, go to a worker."""
    if namespace_id is not None and verb in VERB_KINDS:
        notify_event.delay(event_id)


@receiver(signals.notification_created, dispatch_uid="notifications.deliver")
def notification_created(sender: object, notification_id: int, channel: str, **kw: Any) -> None:
    if channel in (Channel.EMAIL, Channel.WEBHOOK):
        deliver.delay(notification_id)
