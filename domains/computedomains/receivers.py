"""How the lifecycle reacts to what the business announces (connected by `apps.ready()`).

Business code never queues a task itself: it announces a fact after commit ("this domain
waits for placement", "capacity came free") and these receivers queue the Celery task.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache
from django.dispatch import receiver

from domains import signals
from domains.audit.models import Event
from domains.computedomains.incidents import BACK_UP_VERBS, incident_close, incident_open
from domains.computedomains.members import tray_marked_down
from domains.computedomains.selectors import PEERS_MAX_S, PEERS_QUIET_S, peers_key
from domains.computedomains.tasks import failover, nudge_peers, place_domain, place_queued

log = logging.getLogger(__name__)


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
    """Inside the transaction that marked the tray down: open its incident (while it still
    knows the domains on the tray), then end or fail its membership."""
    incident_open(node_id=node_id)
    tray_marked_down(node_id=node_id, message=message)


@receiver(signals.event_recorded, dispatch_uid="computedomains.tray_back_up")
def end_incident(sender: object, event_id: int, verb: str = "", **kwargs: Any) -> None:
    """A tray left the down state (marked up, or Kubernetes brought it back): its incident
    ends. Other verbs cost nothing here."""
    if verb not in BACK_UP_VERBS:
        return
    row = Event.objects.filter(pk=event_id).values_list("node_id", "created_at").first()
    if row is not None and row[0] is not None:
        incident_close(node_id=row[0], at=row[1])


@receiver(signals.failover_wanted, dispatch_uid="computedomains.failover")
def queue_failover(sender: object, domain_id: int, **kwargs: Any) -> None:
    """A running domain lost a tray: replace it (or let go of its claims) on a worker now,
    not at the next reconcile pass."""
    failover.delay()


@receiver(signals.peers_changed, dispatch_uid="computedomains.nudge_peers")
def queue_peer_nudge(sender: object, domain_id: int, clique_id: int, **kwargs: Any) -> None:
    """One nudge of the clique's members per burst; Redis away: nudge them now."""
    try:
        if cache.add(peers_key(domain_id, clique_id), 1, PEERS_MAX_S + 10):
            nudge_peers.apply_async((domain_id,), {"clique_id": clique_id}, countdown=PEERS_QUIET_S)
        return
    except Exception:
        log.warning("could not queue computedomains.nudge_peers for %s; nudging now", domain_id)
    nudge_peers(domain_id, clique_id=clique_id)
