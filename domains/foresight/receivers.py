"""What foresight does when the business announces a change (connected by `apps.ready()`):
anything that moves the queue (a domain queued or approved, capacity freed) refreshes the
placement estimates on a worker."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from domains import signals
from domains.foresight.tasks import refresh_estimates


@receiver(signals.placement_wanted, dispatch_uid="foresight.estimates.placement_wanted")
def queue_changed(sender: object, **kwargs: Any) -> None:
    refresh_estimates.delay()


@receiver(signals.capacity_freed, dispatch_uid="foresight.estimates.capacity_freed")
def capacity_freed(sender: object, **kwargs: Any) -> None:
    refresh_estimates.delay()
