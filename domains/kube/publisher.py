"""Writing domains out to the cluster: create, mirror status, remove on release (the
object's shape is in `crd`).

Level-triggered like the rest of the controller: `publish_domain` compares what the
cluster holds with what the database says and writes only the difference, so running it
twice, late, or after a lost message is harmless. Transient API trouble raises
`KubeUnavailable` (the Celery task retries it with backoff); whatever still fails is picked
up by the beat task `kube.reconcile` (`domains_to_publish`) from the database, so no change
is lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, cast

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from domains.audit.events import KUBERNETES
from domains.computedomains.models import LIVE_PHASES, ComputeDomain
from domains.computedomains.services import domain_release
from domains.kube.client import KubeRejected, api_client, call, is_not_found
from domains.kube.crd import (
    API_GROUP,
    API_VERSION,
    FINALIZER,
    MESSAGE_ANNOTATION,
    PHASE_ANNOTATION,
    PLURAL,
    REASON_ANNOTATION,
    UID_ANNOTATION,
    computedomain_object,
)
from domains.kube.dra import ClaimTemplates
from domains.kube.models import PublishedDomain, RefusedComputeDomain
from domains.kube.services import kube_computedomain_observed

log = logging.getLogger(__name__)


class Cluster:
    """The ComputeDomain calls the publisher makes, on one ApiClient."""

    def __init__(self, api: client.ApiClient | None = None) -> None:
        self.api = api or api_client()
        self.custom = client.CustomObjectsApi(self.api)
        self.templates = ClaimTemplates(self.api)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _object(call(
                self.custom.get_namespaced_custom_object,
                API_GROUP, API_VERSION, namespace, PLURAL, name,
            ))  # fmt: skip
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return _object(call(
                self.custom.create_namespaced_custom_object,
                API_GROUP, API_VERSION, namespace, PLURAL, body,
            ))  # fmt: skip
        except ApiException as exc:
            if is_not_found(exc):  # the only 404 of a create: no such namespace there
                raise KubeRejected(404, f"namespace {namespace} does not exist in the cluster")
            raise

    def patch(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return _object(call(
            self.custom.patch_namespaced_custom_object,
            API_GROUP, API_VERSION, namespace, PLURAL, name, body,
        ))  # fmt: skip

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return _object(call(
            self.custom.patch_namespaced_custom_object_status,
            API_GROUP, API_VERSION, namespace, PLURAL, name, {"status": status},
        ))  # fmt: skip

    def hold(self, current: dict[str, Any]) -> dict[str, Any]:
        """The object with the portal's finalizer on it (added unless there, or unless the
        object is already being deleted: the API server takes no new finalizer then)."""
        meta = current["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER in finalizers or meta.get("deletionTimestamp"):
            return current
        return self._set_finalizers(current, [*finalizers, FINALIZER])

    def let_go(self, namespace: str, name: str, uid: str) -> None:
        """Take the portal's finalizer off the object (of that uid), if it is still there."""
        current = self.get(namespace, name)
        if current is None or current["metadata"]["uid"] != uid:
            return
        finalizers = list(current["metadata"].get("finalizers") or [])
        if FINALIZER in finalizers:
            self._set_finalizers(current, [f for f in finalizers if f != FINALIZER])

    def _set_finalizers(self, current: dict[str, Any], finalizers: list[str]) -> dict[str, Any]:
        meta = current["metadata"]
        body: dict[str, Any] = {"finalizers": finalizers}
        if meta.get("resourceVersion"):  # another writer meanwhile: 409, tried again
            body["resourceVersion"] = meta["resourceVersion"]
        try:
            return self.patch(meta["namespace"], meta["name"], {"metadata": body})
        except ApiException as exc:
            if is_not_found(exc):
                return current
            raise

    def delete(self, namespace: str, name: str, uid: str) -> None:
        options = {"preconditions": {"uid": uid}} if uid else {}
        try:
            call(
                self.custom.delete_namespaced_custom_object,
                API_GROUP, API_VERSION, namespace, PLURAL, name, body=options,
            )  # fmt: skip
        except ApiException as exc:
            if not is_not_found(exc):
                raise


def _object(answer: object) -> dict[str, Any]:
    """The custom-object calls answer with the object as parsed JSON."""
    return cast(dict[str, Any], answer)


def desired_hash(domain: ComputeDomain) -> str:
    """What the cluster should show for this domain, hashed; `removed` once it has ended."""
    if not domain.is_live:
        return "removed"
    obj = computedomain_object(domain)
    text = json.dumps([obj["metadata"]["annotations"], obj["status"]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def publish_domain(*, domain_id: int, cluster: Cluster | None = None) -> str:
    """Bring the domain's cluster object in line with the database; returns what was done.

    One publish of a domain at a time, each reading the domain only once it holds the
    domain's row of `PublishedDomain`: two tasks for one domain (a burst's next publish,
    queued while the last one still runs) would otherwise interleave, and the older one,
    having read the domain live, would hold the object again and make again the claim
    template that the newer one, releasing, had just removed.
    """
    if not ComputeDomain.objects.filter(pk=domain_id).exists():
        return "no such domain"
    row, _ = PublishedDomain.objects.get_or_create(domain_id=domain_id)
    PublishedDomain.objects.filter(pk=row.pk).update(attempts=F("attempts") + 1)
    with transaction.atomic():
        row = PublishedDomain.objects.select_for_update().get(pk=row.pk)
        domain = ComputeDomain.objects.select_related("namespace").get(pk=domain_id)
        return _publish_or_remove(cluster or Cluster(), domain, row)


def _publish_or_remove(cluster: Cluster, domain: ComputeDomain, row: PublishedDomain) -> str:
    try:
        if domain.is_live:
            outcome = _publish(cluster, domain, row)
        else:
            outcome = _remove(cluster, domain, row)
    except KubeRejected as exc:
        # Permanent (403, missing namespace, invalid): remember and say so. The hash is
        # stored too, so reconcile tries again only once the domain changes, not every pass.
        _save(row, last_error=str(exc)[:2000], published_hash=desired_hash(domain))
        log.warning("publishing %s refused: %s", domain, exc)
        return f"refused: {exc}"
    return outcome


def _publish(cluster: Cluster, domain: ComputeDomain, row: PublishedDomain) -> str:
    ns, name = domain.namespace.name, domain.name
    wanted = computedomain_object(domain)
    current = cluster.get(ns, name)
    if current is None:
        if row.object_uid:
            # It existed and someone deleted it, unseen by the watch: that releases it.
            domain_release(actor=KUBERNETES, domain=domain, reason="ComputeDomain deleted")
            return "deleted in the cluster: released"
        body = {k: v for k, v in wanted.items() if k != "status"}
        current = cluster.create(ns, body)
        _save(row, object_uid=current["metadata"]["uid"])
        outcome = "created"
    elif not _is_ours(current, domain, row):
        if current["metadata"].get("deletionTimestamp"):
            # A released namesake's, held until that domain let go of its claim template;
            # this one is published as soon as it is gone (`_hand_over`).
            _save(row, last_error=f"{ns}/{name} in the cluster is still being deleted")
            return "waiting for the old object to go"
        _save(row, last_error=f"{ns}/{name} in the cluster belongs to another domain")
        return "name taken in the cluster"
    else:
        outcome = "unchanged"
    current = cluster.hold(current)
    annotations = current["metadata"].get("annotations") or {}
    wanted_annotations = wanted["metadata"]["annotations"]
    if any(annotations.get(k) != v for k, v in wanted_annotations.items()):
        cluster.patch(ns, name, {"metadata": {"annotations": wanted_annotations}})
        outcome = "updated" if outcome == "unchanged" else outcome
    if current.get("status") != wanted["status"]:
        # A merge patch: a key left out stays, so `nodes` gone is written as null.
        cluster.patch_status(ns, name, {"nodes": None} | wanted["status"])
        outcome = "updated" if outcome == "unchanged" else outcome
    if cluster.templates.ensure(domain) == "template created":
        outcome = "updated" if outcome == "unchanged" else outcome
    _save(row, object_uid=current["metadata"]["uid"], hash_=desired_hash(domain))
    return outcome


def _is_ours(current: dict[str, Any], domain: ComputeDomain, row: PublishedDomain) -> bool:
    meta = current["metadata"]
    own = (meta.get("annotations") or {}).get(UID_ANNOTATION)
    return own == str(domain.uid) or (bool(row.object_uid) and meta.get("uid") == row.object_uid)


def _remove(cluster: Cluster, domain: ComputeDomain, row: PublishedDomain) -> str:
    if row.removed:
        return "already removed"
    ns, name = domain.namespace.name, domain.name
    current = cluster.get(ns, name)
    held = ""  # the uid of our object, which our finalizer holds until the end
    if current is not None and _is_ours(current, domain, row):
        held = current["metadata"]["uid"]
        if not current["metadata"].get("deletionTimestamp"):
            cluster.delete(ns, name, held)  # it stays, being deleted, until we let go
        outcome = "removed"
    else:
        outcome = "nothing to remove"
    try:
        template = cluster.templates.remove(domain)
    except KubeRejected:
        template = "no template"  # a cluster without DRA never had one
    if template.startswith("waiting"):
        # Pods still hold claims made from it; reconcile tries again (hash not "removed").
        _save(row, last_error=f"ResourceClaimTemplate kept: {template}"[:2000])
        return f"{outcome}; template {template}"
    if held:
        cluster.let_go(ns, name, held)
    _save(row, removed=True, hash_="removed")
    if template == "template removed" or held:
        _hand_over(cluster, domain)
    return outcome


def _hand_over(cluster: Cluster, ended: ComputeDomain) -> None:
    """A live domain of the same name or template name (applied or requested again while
    this one released) was refused the object's name or the template's meanwhile, and is
    not published again until it changes: publish it now that both are free."""
    waiting = ComputeDomain.objects.filter(
        Q(name=ended.name) | Q(resource_claim_template=ended.resource_claim_template),
        namespace_id=ended.namespace_id,
        phase__in=LIVE_PHASES,
    ).exclude(pk=ended.pk)
    for domain_id in waiting.values_list("pk", flat=True):
        publish_domain(domain_id=domain_id, cluster=cluster)


def _save(row: PublishedDomain, *, hash_: str | None = None, **fields: Any) -> None:
    if hash_ is not None:
        fields.update(published_hash=hash_, published_at=timezone.now(), last_error="")
    PublishedDomain.objects.filter(pk=row.pk).update(**fields)
    for key, value in fields.items():
        setattr(row, key, value)


# --- refusals ------------------------------------------------------------------------------


def _refused_object(
    refusal_id: int, cluster: Cluster
) -> tuple[RefusedComputeDomain | None, dict[str, Any] | None]:
    """The refusal and the object it is about, while that object is still the one refused."""
    refusal = RefusedComputeDomain.objects.filter(pk=refusal_id).first()
    if refusal is None:
        return None, None
    current = cluster.get(refusal.namespace, refusal.name)
    if current is None or current["metadata"]["uid"] != refusal.object_uid:
        return refusal, None
    return refusal, current


def report_refusal(*, refusal_id: int, cluster: Cluster | None = None) -> str:
    """Tell the kubectl user why their ComputeDomain was not adopted, on the object itself."""
    cluster = cluster or Cluster()
    refusal, current = _refused_object(refusal_id, cluster)
    if refusal is None:
        return "no such refusal"
    if current is None:
        return "object gone"
    annotations = {
        PHASE_ANNOTATION: "Refused",
        REASON_ANNOTATION: refusal.reason,
        MESSAGE_ANNOTATION: refusal.message[:1000],
    }
    cluster.patch(refusal.namespace, refusal.name, {"metadata": {"annotations": annotations}})
    cluster.patch_status(refusal.namespace, refusal.name, {"status": "NotReady", "nodes": None})
    RefusedComputeDomain.objects.filter(pk=refusal.pk).update(reported=True)
    return "reported"


def retry_refusal(*, refusal_id: int, cluster: Cluster | None = None) -> str:
    """Try a refused object again now, as a resync would (its name became free)."""
    cluster = cluster or Cluster()
    refusal, current = _refused_object(refusal_id, cluster)
    if refusal is None:
        return "no such refusal"
    if current is None:
        return "object gone"
    seen = kube_computedomain_observed(obj=current, retry_refused=True)
    if seen.domain is not None:
        return f"adopted; {publish_domain(domain_id=seen.domain.pk, cluster=cluster)}"
    if seen.refusal is not None and not seen.refusal.reported:
        return f"refused again; {report_refusal(refusal_id=seen.refusal.pk, cluster=cluster)}"
    return "refused again"


# --- reconcile -----------------------------------------------------------------------------


def domains_to_publish() -> list[int]:
    """Ids of domains whose cluster object may differ from the database.

    Live domains and ended ones not yet removed; each compared by hash, so a pass over an
    unchanged fabric makes no API call at all.
    """
    candidates = (
        ComputeDomain.objects.select_related("namespace")
        .filter(Q(phase__in=LIVE_PHASES) | Q(kube_object__removed=False))
        .select_related("kube_object")
    )
    stale = []
    for domain in candidates:
        row = getattr(domain, "kube_object", None)
        if row is None or row.published_hash != desired_hash(domain):
            stale.append(domain.pk)
    return stale


def unreported_refusals() -> list[int]:
    return list(RefusedComputeDomain.objects.filter(reported=False).values_list("pk", flat=True))
