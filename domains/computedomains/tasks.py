"""Controller tasks: thin wrappers that load ids, call one service and classify errors.

All are idempotent (compare-and-set on phase, row locks), so `acks_late` redelivery after
a killed worker, a duplicate message or the beat reconcile running beside them is safe.
Only `TransientError` and a lost database (`DATABASE_AWAY`: PostgreSQL restarting or
unreachable) are retried; anything else is a bug and is logged, not looped.
Business code never imports this module: it announces "placement wanted", "capacity
freed" or "peers changed", and `receivers.py` queues these tasks when it hears that; beat
runs the two passes of `reconcile.py` (portal/settings.py, CELERY_BEAT_SCHEDULE).
"""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.core.cache import cache

from domains.computedomains import reconcile
from domains.computedomains.claimsweep import claims_release_lost
from domains.computedomains.failover import domains_replace_lost
from domains.computedomains.models import DomainMember, Phase
from domains.computedomains.placing import domains_place_burst, domains_place_queued
from domains.computedomains.selectors import peers_key, peers_nudge_wait
from domains.errors import TransientError, retry_on
from domains.signals import announce_desired_state

log = logging.getLogger(__name__)

RETRY = retry_on(TransientError)


@shared_task(name="computedomains.place_domain", **RETRY)
def place_domain(domain_id: int) -> str:
    """Place an Admitted domain (queued right after admission or approval), and with it
    every other one admitted and not yet tried: a burst of requests in one transaction."""
    handled = domains_place_burst(domain_id=domain_id)
    forming = sum(d.phase == Phase.FORMING for d in handled)
    return f"{forming} of {len(handled)} placed" if handled else "skipped"


@shared_task(name="computedomains.place_queued", **RETRY)
def place_queued() -> int:
    """Retry the queue FIFO: run when trays or channels come free."""
    return domains_place_queued()


@shared_task(name="computedomains.reconcile", **RETRY)
def reconcile_pass() -> dict[str, int]:
    """Finish whatever a lost message or a killed worker left (beat, every few seconds)."""
    return reconcile.reconcile()


@shared_task(name="computedomains.reap_stale_heartbeats", **RETRY)
def reap_pass() -> int:
    """Members of running domains whose agent went silent count as not ready (beat)."""
    return reconcile.reap_stale_heartbeats()


@shared_task(name="computedomains.failover", **RETRY)
def failover() -> dict[str, int]:
    """Replace the trays placed domains lost, and release the claims of lost trays, now
    (queued when a tray is marked down; the reconcile pass does the same on its beat)."""
    return {
        "replaced": domains_replace_lost(),
        "claims": claims_release_lost(),
    }


@shared_task(name="computedomains.nudge_peers", acks_late=True)
def nudge_peers(domain_id: int, first: float | None = None, clique_id: int | None = None) -> int:
    """Tell the members of a domain that follows its workload in the clique (None: all, as
    a nudge queued before cliques had their own) to re-fetch their peer list.

    Queued once per burst of joins and leaves (see receivers) and put off while the burst
    goes on: 18 trays joining within a second or two would otherwise make every member fetch
    its desired state many times, and spend its daemon's one re-resolve per 5 s on a peer
    list that is still growing. `first`: when the burst's first change was seen. The
    members of the domain's other cliques are not told: their peers did not change.
    """
    first = first or time.time()
    wait = peers_nudge_wait(domain_id, first=first, clique_id=clique_id)
    if wait > 0:
        nudge_peers.apply_async((domain_id, first), {"clique_id": clique_id}, countdown=wait)
        return 0
    # Before reading: a change after this queues again.
    cache.delete(peers_key(domain_id, clique_id))
    members = DomainMember.objects.filter(domain_id=domain_id, active=True)
    if clique_id is not None:
        members = members.filter(clique_id=clique_id)
    nodes = list(members.values_list("node_id", flat=True))
    announce_desired_state(nodes)
    return len(nodes)
