"""Kubernetes publishing tasks: thin, idempotent, retried only on `KubeUnavailable`.

`publish_domain` is queued whenever a domain changes (see receivers.py); `reconcile` runs from
beat and publishes whatever the database says is not yet in the cluster, so a message lost
with Redis or a task that ran out of retries during an API server outage is caught up.
"""

from __future__ import annotations

import logging

from celery import shared_task

from domains.bursts import Burst
from domains.errors import retry_on
from domains.kube import publisher, sweep
from domains.kube.client import KubeUnavailable, api_client, kube_enabled

log = logging.getLogger(__name__)

RETRY = retry_on(KubeUnavailable, backoff_max=60, max_retries=8)


@shared_task(name="kube.publish_domain", **RETRY)
def publish_domain(domain_id: int) -> str:
    """Create, update or remove the domain's ComputeDomain object (queued once per burst of
    changes, see receivers.py)."""
    PUBLISHES.clear(domain_id)  # before reading: a change from now on queues the next publish
    if not kube_enabled():
        return "disabled"
    return publisher.publish_domain(domain_id=domain_id)


# A domain's publish queued (receivers.py); a publish lost with a killed worker costs 5 s.
PUBLISHES = Burst("kube:publish-pending", pending_s=5)


@shared_task(name="kube.report_refusal", **RETRY)
def report_refusal(refusal_id: int) -> str:
    """Write why a kubectl-created ComputeDomain was not adopted onto the object."""
    if not kube_enabled():
        return "disabled"
    return publisher.report_refusal(refusal_id=refusal_id)


@shared_task(name="kube.retry_refusal", **RETRY)
def retry_refusal(refusal_id: int) -> str:
    """Adopt a refused kubectl-created ComputeDomain now if it can be (its name is free)."""
    if not kube_enabled():
        return "disabled"
    return publisher.retry_refusal(refusal_id=refusal_id)


@shared_task(name="kube.withdraw_slices", **RETRY)
def withdraw_slices(node_ids: list[int]) -> int:
    """Withdraw the ResourceSlices of trays their domain lost (`domains.kube.sweep`)."""
    if not kube_enabled():
        return 0
    return sweep.slices_withdraw(api_client(), node_ids=node_ids)


@shared_task(name="kube.reconcile", acks_late=True)
def reconcile() -> dict[str, int]:
    """Publish every domain whose object may differ from the database, and release the
    claims no pod holds any more (`sweep.claims_reconcile`), in this task.

    One pass, in order, stopping at the first sign that the API server is away: fanning
    out a retried task per domain during an outage would only pile up the queue. The next
    beat pass goes on from the database.
    """
    if not kube_enabled():
        return {}
    done = {"domains": 0, "refusals": 0, "claims": 0}
    cluster = publisher.Cluster()
    try:
        for domain_id in publisher.domains_to_publish():
            publisher.publish_domain(domain_id=domain_id, cluster=cluster)
            done["domains"] += 1
        for refusal_id in publisher.unreported_refusals():
            publisher.report_refusal(refusal_id=refusal_id, cluster=cluster)
            done["refusals"] += 1
        done["claims"] = sweep.claims_reconcile(cluster.api)
    except KubeUnavailable as exc:
        log.warning("kube.reconcile stopped early, the next pass goes on: %s", exc)
        done["stopped"] = 1
    return done
