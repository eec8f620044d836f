"""What foresight does when the business announces a change (connected by `apps.ready()`):
anything that moves the queue (a domain queued or approved, capacity freed) refreshes the
placement estimates on a worker, once per burst.

Eight tenants requesting at once, or a rack's domains released together, would otherwise
queue eight forecasts of the same queue, each reading the whole fabric while the placements
they forecast wait for the CPU. The first change of a burst queues one refresh a moment
later (`REFRESH_DELAY_S`) and marks it pending in the cache; the changes behind it find the
mark and queue nothing. The refresh clears the mark before it reads, so a change landing
meanwhile queues the next one. The mark expires after `REFRESH_PENDING_S`, so a refresh lost
with a killed worker costs at most that; beat refreshes every 15 s whatever happens.
"""

from __future__ import annotations

from typing import Any

from django.core.cache import cache
from django.dispatch import receiver

from domains import signals
from domains.foresight.tasks import REFRESH_PENDING_KEY, refresh_estimates

REFRESH_PENDING_S = 5
REFRESH_DELAY_S = 0.2


def queue_refresh() -> None:
    # Redis away: raises (the broker is away too), and `send_logged` logs it; beat catches up.
    if cache.add(REFRESH_PENDING_KEY, 1, REFRESH_PENDING_S):
        refresh_estimates.apply_async(countdown=REFRESH_DELAY_S)


@receiver(signals.placement_wanted, dispatch_uid="foresight.estimates.placement_wanted")
def queue_changed(sender: object, **kwargs: Any) -> None:
    queue_refresh()


@receiver(signals.capacity_freed, dispatch_uid="foresight.estimates.capacity_freed")
def capacity_freed(sender: object, **kwargs: Any) -> None:
    queue_refresh()
