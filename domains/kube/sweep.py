"""What the cluster still says of trays and claims the portal let go of.

- **Slices of dropped trays.** A tray's ResourceSlice names the domain it serves (its
  `domain` attribute), and a placed domain's claim template selects the trays whose slice
  names it. A tray the domain lost and replaced keeps its slice as its agent last published
  it, and an agent that is dead never publishes another: the scheduler would allocate the
  workload's replacement pod there, and the tray's agent (if any) would refuse it — DRA
  never re-allocates a claim. So the portal withdraws the lost tray's slice of the node
  agent's driver (`slices_withdraw`); a live agent publishes it again from its desired state
  (no domain), and a dead one's tray stays without devices until its agent is back.
- **Claims no pod holds.** A claim the portal recorded as prepared (`DomainClaim`) whose
  ResourceClaim is gone from the cluster, or deallocated, or reserved for no pod, is
  released (`claims_reconcile`), with an audit event: the pod is gone, and the tray's
  kubelet may never unprepare it (a dead tray). Releasing it frees its share of the domain;
  a domain that follows its workload lets the tray go with its last claim.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentwire.dra import DRIVER_NAME
from domains.computedomains.claimsweep import claims_release
from domains.computedomains.models import DomainClaim
from domains.inventory.models import Node
from domains.kube.client import call, is_not_found
from domains.kube.dra import GROUP, ClaimTemplates


def slices_withdraw(api: client.ApiClient, *, node_ids: list[int]) -> int:
    """Delete the node agent's ResourceSlices of these trays; returns how many."""
    version = ClaimTemplates(api).version
    custom = client.CustomObjectsApi(api)
    removed = 0
    for hostname in Node.objects.filter(pk__in=node_ids).values_list("hostname", flat=True):
        listed = cast(dict[str, Any], call(
            custom.list_cluster_custom_object, GROUP, version, "resourceslices",
            field_selector=f"spec.nodeName={hostname},spec.driver={DRIVER_NAME}",
        ))  # fmt: skip
        for item in listed.get("items", []):
            meta = item["metadata"]
            try:
                call(
                    custom.delete_cluster_custom_object, GROUP, version, "resourceslices",
                    meta["name"], body={"preconditions": {"uid": meta["uid"]}},
                )  # fmt: skip
            except ApiException as exc:
                if not is_not_found(exc):
                    raise
            removed += 1
    return removed


def claims_reconcile(api: client.ApiClient) -> int:
    """Release every prepared claim whose ResourceClaim no pod holds; returns how many."""
    held = DomainClaim.objects.filter(released_at__isnull=True).values_list(
        "pk", "domain_id", "namespace", "claim_uid"
    )
    by_namespace: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for pk, domain_id, namespace, claim_uid in held:
        by_namespace[namespace].append((pk, domain_id, str(claim_uid)))
    if not by_namespace:
        return 0
    templates = ClaimTemplates(api)
    custom = client.CustomObjectsApi(api)
    released = 0
    for namespace, claims in by_namespace.items():
        listed = cast(dict[str, Any], call(
            custom.list_namespaced_custom_object,
            GROUP, templates.version, namespace, "resourceclaims",
        ))  # fmt: skip
        live = {c["metadata"]["uid"]: c for c in listed.get("items", [])}
        gone: dict[tuple[int, str], list[int]] = defaultdict(list)
        for pk, domain_id, uid in claims:
            why = _unheld(live.get(uid))
            if why:
                gone[domain_id, why].append(pk)
        for (domain_id, why), ids in gone.items():
            released += claims_release(domain_id=domain_id, claim_ids=ids, why=why)
    return released


def _unheld(claim: dict[str, Any] | None) -> str:
    """Why no pod holds the claim any more ("" when one does)."""
    if claim is None:
        return "its ResourceClaim is gone from the cluster"
    status = claim.get("status") or {}
    if not status.get("allocation"):
        return "its ResourceClaim was deallocated: no pod holds it"
    if not status.get("reservedFor"):
        return "its ResourceClaim is reserved for no pod: the pod is gone"
    return ""
