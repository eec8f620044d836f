"""What runs on each tray when Kubernetes is on: the pods bound to it and the
ResourceClaims they use, from the kube sync's pod watch (`sync.resources`).

Only pods bound to a tray the portal knows (`spec.nodeName` is a tray's hostname) and not
finished (Succeeded or Failed) are kept; a claim is named by its pod's
`status.resourceClaimStatuses` (claims made from a template) or `spec.resourceClaims`
(claims named outright). Operators see every pod of a tray; a tenant only the pods of the
namespaces they belong to.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from domains.inventory.models import Node
from domains.kube.models import TrayPod
from domains.signals import announce_nodes
from domains.tenancy.selectors import Viewer, is_operator, namespaces_visible_to

FINISHED = ("Succeeded", "Failed")


def pod_claims(pod: dict[str, Any]) -> list[str]:
    """The ResourceClaims a pod uses, by name (in its namespace)."""
    names = [
        s["resourceClaimName"]
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if s.get("resourceClaimName")
    ]
    names += [
        c["resourceClaimName"]
        for c in (pod.get("spec") or {}).get("resourceClaims") or []
        if c.get("resourceClaimName")
    ]
    return sorted(set(names))


def kube_pod_observed(*, pod: dict[str, Any]) -> None:
    """Keep (or drop) the row of a pod as the watch sees it now."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "")
    node_id = (
        Node.objects.filter(hostname=spec.get("nodeName"), gone=False)
        .values_list("pk", flat=True)
        .first()
        if spec.get("nodeName")
        else None
    )
    if node_id is None or status.get("phase") in FINISHED:
        kube_pod_deleted(uid=meta["uid"])
        return
    started = parse_datetime(status["startTime"]) if status.get("startTime") else None
    values = {
        "node_id": node_id,
        "namespace": meta["namespace"],
        "name": meta["name"],
        "phase": phase,
        "claims": pod_claims(pod),
        "started_at": started,
    }
    with transaction.atomic():
        row = TrayPod.objects.select_for_update().filter(uid=meta["uid"]).first()
        if row is not None and all(getattr(row, k) == v for k, v in values.items()):
            return
        TrayPod.objects.update_or_create(uid=meta["uid"], defaults=values)
    announce_nodes([node_id] if row is None or row.node_id == node_id else [node_id, row.node_id])


def kube_pod_deleted(*, uid: str) -> None:
    node_ids = list(TrayPod.objects.filter(uid=uid).values_list("node_id", flat=True))
    if node_ids:
        TrayPod.objects.filter(uid=uid).delete()
        announce_nodes(node_ids)


def kube_pods_resynced(*, present: set[str], listed_at: datetime | None = None) -> None:
    """After a full list: a pod not in it is gone."""
    gone = TrayPod.objects.exclude(uid__in=present)
    node_ids = sorted(set(gone.values_list("node_id", flat=True)))
    if node_ids:
        gone.delete()
        announce_nodes(node_ids)


# --- reads -----------------------------------------------------------------------------------
def tray_pods(viewer: Viewer, node_ids: list[int]) -> list[TrayPod]:
    """The pods on these trays that `viewer` may see, by tray, namespace and name."""
    pods = TrayPod.objects.filter(node_id__in=node_ids).select_related("node")
    if not is_operator(viewer):
        names = namespaces_visible_to(viewer).values_list("name", flat=True)
        pods = pods.filter(namespace__in=list(names))
    return list(pods.order_by("node__hostname", "namespace", "name"))
