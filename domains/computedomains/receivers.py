"""How the lifecycle reacts to what the business announces (connected by `apps.ready()`).

Business code never queues a task itself: it announces a fact after commit ("this domain
waits for placement", "capacity came free") and these receivers queue the Celery task.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from domains import signals
from domains.computedomains.members import tray_marked_down
from domains.computedomains.tasks import place_domain, place_queued


@receiver(signals.placement_wanted, dispatch_uid="computedomains.place_domain")
def queue_placement(sender: object, domain_id: int, **kwargs: Any) -> None:
    """Admitted (or approved) and committed: place it on a worker."""
    place_domain.delay(domain_id)


@receiver(signals.capacity_freed, dispatch_uid="computedomains.place_queued")
def queue_queued_placement(sender: object, **kwargs: Any) -> None:
    """Trays or channels came free: retry the queue on a worker."""
    place_queued.delay()


@receiver(signals.node_marked_down, dispatch_uid="computedomains.tray_marked_down")
def let_go_of_tray(sender: object, node_id: int, message: str, **kwargs: Any) -> None:
    """Inside the transaction that marked the tray down: end or fail its membership."""
    tray_marked_down(node_id=node_id, message=message)
