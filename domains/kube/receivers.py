"""What the Kubernetes integration does when the business announces a change
(connected by `apps.ready()`).

A domain's object is published once per burst of changes: 72 trays joining one domain
change it some 350 times in a few seconds, and each publish writes the status of every
member. The first change of a burst queues one publish and marks it pending in the cache;
the changes behind it find the mark and queue nothing. The publish clears the mark before
it reads the domain, so a change that lands meanwhile queues the next one (publishing is
level-triggered: it writes what the database says then; `domains.bursts`). The mark
expires after 5 s (`tasks.PUBLISHES`), so a publish lost with a killed worker costs that
long at most, and the beat `kube.reconcile` catches up anyway. When the cache is away, every
change is queued.
"""

from __future__ import annotations

import logging

from django.dispatch import receiver

from domains import signals
from domains.computedomains.models import ComputeDomain, Phase
from domains.kube.client import kube_enabled
from domains.kube.models import RefusedComputeDomain
from domains.kube.tasks import PUBLISHES, publish_domain, retry_refusal, withdraw_slices

log = logging.getLogger(__name__)


@receiver(signals.domain_changed, dispatch_uid="kube.publish_on_change")
def publish_on_change(sender: object, domain_uid: str, **kwargs: object) -> None:
    """Queue publishing of the changed domain (sent after commit, so the row is visible).

    A failure to queue (Redis away) must not break the service that announced the change;
    the beat `kube.reconcile` publishes it later from the database.
    """
    if not kube_enabled():
        return
    domain_id = ComputeDomain.objects.filter(uid=domain_uid).values_list("pk", flat=True).first()
    if domain_id is None:
        return
    try:
        if _first_of_burst(domain_id):
            publish_domain.delay(domain_id)
    except Exception:
        log.warning("could not queue kube.publish_domain for %s; reconcile will", domain_uid)


def _first_of_burst(domain_id: int) -> bool:
    """No publish of the domain is queued yet (now one is marked); True when the cache
    cannot tell."""
    try:
        return PUBLISHES.mark(domain_id)
    except Exception:
        return True


@receiver(signals.domain_changed, dispatch_uid="kube.retry_namesake_refusals")
def retry_namesake_refusals(
    sender: object, domain_uid: str, phase: str = "", **kwargs: object
) -> None:
    """A domain that ended frees its name: an object of that name refused while it released
    (`kubectl delete -f` and `kubectl apply -f` again) is tried again now, not at the next
    resync minutes later."""
    if not kube_enabled() or phase not in (Phase.RELEASED, Phase.FAILED):
        return
    ended = ComputeDomain.objects.filter(uid=domain_uid).select_related("namespace").first()
    if ended is None:
        return
    refusals = RefusedComputeDomain.objects.filter(
        namespace=ended.namespace.name, name=ended.name
    ).values_list("pk", flat=True)
    for refusal_id in refusals:
        try:
            retry_refusal.delay(refusal_id)
        except Exception:
            log.warning("could not queue kube.retry_refusal %s; the next resync will", refusal_id)


@receiver(signals.trays_dropped, dispatch_uid="kube.withdraw_slices")
def withdraw_dropped_slices(sender: object, node_ids: list[int], **kwargs: object) -> None:
    """Trays a domain lost and replaced: their slices must no longer name it."""
    if not kube_enabled():
        return
    try:
        withdraw_slices.delay(list(node_ids))
    except Exception:
        log.warning("could not queue kube.withdraw_slices for %s", node_ids)
