"""A portal domain as the `resource.nvidia.com/v1beta1` ComputeDomain object it publishes
(the shape only; `publisher` writes it to the cluster).

The object carries exactly the fields of NVIDIA's ComputeDomain CRD, so that tools written
for NVIDIA's driver read it unchanged: `spec.numNodes`, `spec.channel.resourceClaimTemplate
.name`, `spec.channel.allocationMode` (`Single` or `All`), and `status.status` (`Ready` or
`NotReady`) with `status.nodes[]` (`name`, `ipAddress`, `cliqueID`, `index`, `status`).

The status means what NVIDIA's means, as its own tests check it: `nodes` lists the trays the
domain's workload runs on (a tray where one of its claims is prepared; NVIDIA lists the
nodes its IMEX daemons run on, which are there for the workload's pods), and is left out
while there is none; `status` is `Ready` when at least `numNodes` such trays are listed and
each is ready, as NVIDIA's controller computes it (so a domain with `numNodes: 1` is
NotReady before its pod exists and again after it is deleted, and one with `numNodes: 0` is
Ready while it waits for its workload). A placed domain's trays are reserved and formed
before its pods arrive; that, the portal's phase, reason and message, are the portal's own
view: what the CRD has no field for goes into annotations (a real API server prunes unknown
status fields; `kubectl describe computedomain` shows them), and the portal's API lists
every tray a domain holds.
"""

from __future__ import annotations

from typing import Any

from domains.computedomains.models import ComputeDomain, DomainClaim, MemberState, Phase

API_GROUP = "resource.nvidia.com"
API_VERSION = "v1beta1"
KIND = "ComputeDomain"
PLURAL = "computedomains"

MANAGED_BY = "domain-portal"
UID_ANNOTATION = "portal.domains/domain-uid"
PHASE_ANNOTATION = "portal.domains/phase"
REASON_ANNOTATION = "portal.domains/reason"
MESSAGE_ANNOTATION = "portal.domains/message"
RACKS_ANNOTATION = "portal.domains/racks"
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
    """The portal's richer status, where `kubectl describe` shows it. The message of a
    domain over several cliques names the clique (and rack) it waits for or that failed;
    `racks` lists the racks its trays are in (a placed domain's from placement on, one that
    follows its workload's as its pods land; empty while it holds none)."""
    return {
        UID_ANNOTATION: str(domain.uid),
        PHASE_ANNOTATION: domain.phase,
        REASON_ANNOTATION: domain.reason,
        MESSAGE_ANNOTATION: domain.message[:MESSAGE_MAX],
        RACKS_ANNOTATION: ",".join(domain_racks(domain)),
    }


def domain_racks(domain: ComputeDomain) -> list[str]:
    """The names of the racks the domain's active members are in, sorted."""
    racks = domain.members.filter(active=True).values_list("node__rack__name", flat=True)
    return sorted({name for name in racks if name})


def computedomain_spec(domain: ComputeDomain) -> dict[str, Any]:
    """NVIDIA's spec; `numNodes` kept (deprecated there) because here it is the request."""
    return {
        "numNodes": domain.num_nodes,
        "channel": {
            "resourceClaimTemplate": {"name": domain.resource_claim_template},
            "allocationMode": domain.allocation_mode,
        },
    }


# Phases in which a domain serves its workload's claims (see domains.computedomains.claims).
SERVING_PHASES = (Phase.ADMITTED, Phase.FORMING, Phase.READY, Phase.DEGRADED)


def computedomain_status(domain: ComputeDomain) -> dict[str, Any]:
    """NVIDIA's global status over the trays the workload runs on (see the module doc);
    `nodes` left out while there is none, as NVIDIA's controller leaves it."""
    nodes = workload_nodes(domain)
    ready = (
        domain.phase in SERVING_PHASES
        and len(nodes) >= domain.num_nodes
        and all(n["status"] == "Ready" for n in nodes)
    )
    status: dict[str, Any] = {"status": "Ready" if ready else "NotReady"}
    if nodes:
        status["nodes"] = nodes
    return status


def workload_nodes(domain: ComputeDomain) -> list[dict[str, Any]]:
    """`status.nodes[]`: the trays where a claim of the domain is prepared, each with its
    clique's `cliqueID` and its `index` within that clique (as NVIDIA's driver counts them:
    its pods may be in several cliques, one IMEX ensemble each). A member is Ready when its
    IMEX daemon is ready and connected; a tray in no NVLink clique (its claim prepared
    without a channel: index -1, no clique, as NVIDIA lists a node that is not
    fabric-attached) when its claim is prepared."""
    claimed = {
        node_id: (host, ip or "")
        for node_id, host, ip in DomainClaim.objects.filter(
            domain=domain, released_at__isnull=True
        ).values_list("node_id", "node__hostname", "node__management_ip")
    }
    members = list(
        domain.members.filter(active=True, node_id__in=claimed)
        .select_related("node", "clique")
        .order_by("clique__cluster_uuid", "clique__clique_id", "index")  # clique by clique
    )
    nodes = [
        {
            "name": m.node.hostname,
            "ipAddress": m.ip_address,
            "cliqueID": m.clique.label,
            "index": m.index,
            "status": "Ready" if m.state == MemberState.READY else "NotReady",
        }
        for m in members
    ]
    joined = {m.node_id for m in members}
    plain = sorted(entry for node_id, entry in claimed.items() if node_id not in joined)
    return nodes + [
        {"name": host, "ipAddress": ip, "cliqueID": "", "index": -1, "status": "Ready"}
        for host, ip in plain
    ]
