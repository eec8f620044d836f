"""A portal domain as the `resource.nvidia.com/v1beta1` ComputeDomain object it publishes
(the shape only; `publisher` writes it to the cluster).

The object carries exactly the fields of NVIDIA's ComputeDomain CRD, so that tools written
for NVIDIA's driver read it unchanged: `spec.numNodes`, `spec.channel.resourceClaimTemplate
.name`, `spec.channel.allocationMode` (`Single` or `All`), and `status.status` (`Ready` or
`NotReady`) with `status.nodes[]` (`name`, `ipAddress`, `cliqueID`, `index`, `status`).
What the CRD has no field for (the portal's phase, reason and message) goes into
annotations, because a real API server prunes unknown status fields: `kubectl describe
computedomain` shows them there.
"""

from __future__ import annotations

from typing import Any

from domains.computedomains.models import ComputeDomain, MemberState, Phase

API_GROUP = "resource.nvidia.com"
API_VERSION = "v1beta1"
KIND = "ComputeDomain"
PLURAL = "computedomains"

MANAGED_BY = "domain-portal"
UID_ANNOTATION = "portal.domains/domain-uid"
PHASE_ANNOTATION = "portal.domains/phase"
REASON_ANNOTATION = "portal.domains/reason"
MESSAGE_ANNOTATION = "portal.domains/message"
MESSAGE_MAX = 1000
# On every object the portal publishes or adopts: deleting it waits until the domain has
# let go of its trays and its ResourceClaimTemplate is gone, so an object of the same name
# applied again (`kubectl delete -f x.yaml && kubectl apply -f x.yaml`) never meets the old
# template. NVIDIA's driver holds its objects the same way.
FINALIZER = "portal.domains/release"


def computedomain_object(domain: ComputeDomain) -> dict[str, Any]:
    """The full object (metadata, spec, status) for this domain."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": computedomain_metadata(domain),
        "spec": computedomain_spec(domain),
        "status": computedomain_status(domain),
    }


def computedomain_metadata(domain: ComputeDomain) -> dict[str, Any]:
    return {
        "name": domain.name,
        "namespace": domain.namespace.name,
        "labels": {**domain.labels, "app.kubernetes.io/managed-by": MANAGED_BY},
        "annotations": status_annotations(domain),
        "finalizers": [FINALIZER],
    }


def status_annotations(domain: ComputeDomain) -> dict[str, str]:
    """The portal's richer status, where `kubectl describe` shows it."""
    return {
        UID_ANNOTATION: str(domain.uid),
        PHASE_ANNOTATION: domain.phase,
        REASON_ANNOTATION: domain.reason,
        MESSAGE_ANNOTATION: domain.message[:MESSAGE_MAX],
    }


def computedomain_spec(domain: ComputeDomain) -> dict[str, Any]:
    """NVIDIA's spec; `numNodes` kept (deprecated there) because here it is the request."""
    return {
        "numNodes": domain.num_nodes,
        "channel": {
            "resourceClaimTemplate": {"name": domain.resource_claim_template},
            "allocationMode": domain.allocation_mode,
        },
    }


def computedomain_status(domain: ComputeDomain) -> dict[str, Any]:
    """`Ready` only while the portal says Ready; nodes[] are the trays still held."""
    members = domain.members.filter(active=True).select_related("node", "clique").order_by("index")
    return {
        "status": "Ready" if domain.phase == Phase.READY else "NotReady",
        "nodes": [
            {
                "name": m.node.hostname,
                "ipAddress": m.ip_address,
                "cliqueID": m.clique.label,
                "index": m.index,
                "status": "Ready" if m.state == MemberState.READY else "NotReady",
            }
            for m in members
        ],
    }
