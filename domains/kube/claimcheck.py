"""A tray's claim checked against Kubernetes before it is admitted.

The node agent's DRA plugin says which ResourceClaim it is about to prepare and for which
domain; its word is one tray's word, and a compromised tray could name another namespace's
claim and domain to join that tenant's domain. With the Kubernetes integration on, the
portal reads the claim itself and admits it only when

- a ResourceClaim with that uid exists in that namespace under that name;
- the scheduler allocated it to this tray: every device of the node agent's driver in the
  allocation is from the tray's own pool (the agent publishes one pool named after its
  node, and the chart's admission policy keeps any other agent from using that name);
- the allocation's opaque config for the driver (copied from the domain's
  ResourceClaimTemplate) names the domain the agent asks for.

Without the Kubernetes integration there is nothing to check a claim against: claims are
admitted only on the trays the portal placed for the domain, and a tray joins a domain
that follows its workload only where `PORTAL_UNVERIFIED_JOINS` allows it (off by default;
docs/security.md). Every refusal names only the claim and the tray asking.
"""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from kubernetes.client.exceptions import ApiException

from agentwire.dra import DRIVER_NAME
from agentwire.messages import ClaimRef
from domains.computedomains.claims import Admission, claim_admit, claim_title
from domains.errors import PermissionDenied, Unavailable
from domains.inventory.models import Node
from domains.kube.client import KubeUnavailable, api_client, call, is_not_found, kube_enabled
from domains.kube.dra import GROUP, ClaimTemplates


def claim_admit_checked(*, node: Node, claim: ClaimRef, domain_uid: str) -> Admission:
    """`claim_admit`, for a claim Kubernetes confirms (see the module's docstring)."""
    verified = kube_enabled()
    if verified:
        _check_claim(node, claim, domain_uid)
    may_join = verified or settings.PORTAL["UNVERIFIED_JOINS"]
    return claim_admit(node=node, claim=claim, domain_uid=domain_uid, may_join=may_join)


def _check_claim(node: Node, claim: ClaimRef, domain_uid: str) -> None:
    found = _read_claim(claim)
    if found is None or found.get("metadata", {}).get("uid") != claim["uid"]:
        raise PermissionDenied(
            f"{claim_title(claim)} with uid {claim['uid']} does not exist in the cluster: the "
            "tray's agent asked for a claim Kubernetes does not have"
        )
    devices = ((found.get("status") or {}).get("allocation") or {}).get("devices") or {}
    ours = [r for r in devices.get("results") or [] if r.get("driver") == DRIVER_NAME]
    if not any(r.get("pool") == node.hostname for r in ours):
        raise PermissionDenied(
            f"{claim_title(claim)} is not allocated to tray {node.hostname}: only the tray the "
            "scheduler allocated a claim to may prepare it"
        )
    if any(r.get("pool") != node.hostname for r in ours):
        # Never named: the other pools are other trays, maybe another tenant's.
        raise PermissionDenied(
            f"{claim_title(claim)} holds channels of other trays besides {node.hostname}: a "
            "claim of this driver is prepared only where all its devices are"
        )
    named = {
        str(((c.get("opaque") or {}).get("parameters") or {}).get("domainID", ""))
        for c in devices.get("config") or []
        if (c.get("opaque") or {}).get("driver") == DRIVER_NAME
    }
    if named != {domain_uid}:
        raise PermissionDenied(
            f"{claim_title(claim)} does not name ComputeDomain {domain_uid} in its allocation: "
            "the claim's ResourceClaimTemplate decides its domain, not the tray"
        )


def _read_claim(claim: ClaimRef) -> dict[str, Any] | None:
    """The claim as the API server has it; a client per call: a prepare is once per pod."""
    templates = ClaimTemplates(api_client())
    try:
        return cast(dict[str, Any], call(
            templates.custom.get_namespaced_custom_object,
            GROUP, templates.version, claim["namespace"], "resourceclaims", claim["name"],
        ))  # fmt: skip
    except ApiException as exc:
        if is_not_found(exc):
            return None
        raise
    except KubeUnavailable as exc:
        raise Unavailable(
            f"cannot check {claim_title(claim)} with Kubernetes now ({exc}); try again"
        )
