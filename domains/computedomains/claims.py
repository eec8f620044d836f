"""DRA claims on trays: the node agent asks before it prepares a claim, and says when it
has unprepared one (DESIGN.md §6).

A pod that names a domain's ResourceClaimTemplate gets a claim; the scheduler allocates it
to the `channel` device of the tray it picks, and that tray's agent calls `claim_admit`
before it hands the channel to the pod. The portal checks that the claim's namespace owns
the domain and that the tray serves it: a *placed* domain admits only its member trays; a
domain that *follows its workload* (`numNodes: 0`) lets the tray join (`follow`). Every
refusal says what to do, and leaves nothing behind.

`claim_release` is the unprepare: the claim is let go of, and for a domain that follows its
workload the tray's last claim takes it out of the domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from domains.audit.events import Actor, record_event
from domains.computedomains.models import ComputeDomain, DomainClaim, DomainMember, Phase
from domains.computedomains.phases import lock_domain
from domains.errors import Conflict, NotFound, PermissionDenied
from domains.inventory.models import Node

# Phases in which a claim may be prepared (a releasing domain takes no new pods).
ADMITTING_PHASES = (Phase.ADMITTED, Phase.FORMING, Phase.READY, Phase.DEGRADED)


@dataclass(frozen=True)
class ClaimRef:
    uid: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Admission:
    domain: ComputeDomain
    member: DomainMember
    joined: bool  # this claim made the tray a member


def claim_admit(*, node: Node, claim: ClaimRef, domain_uid: str) -> Admission:
    """Admit the claim on the tray (joining it to a domain that follows its workload).

    Idempotent: the kubelet repeats prepares, so a claim already admitted here is answered
    again. Raises NotFound (no such live domain), PermissionDenied (another namespace's
    domain) or Conflict (the tray may not serve it), each naming what to change.
    """
    with transaction.atomic():
        found = (
            ComputeDomain.objects.select_related("namespace")
            .filter(uid=domain_uid)
            .order_by()
            .first()
        )
        if found is None or not found.is_live:
            raise NotFound(
                f"{claim}: ComputeDomain {domain_uid} does not exist or has ended; the claim's "
                "ResourceClaimTemplate belongs to a domain that is gone"
            )
        if found.namespace.name != claim.namespace:
            raise PermissionDenied(
                f"{claim} may not use ComputeDomain {found}: a claim can only use a domain of "
                "its own namespace"
            )
        domain = lock_domain(found.pk)
        assert domain is not None  # the row exists: we just read it
        return _admit(domain, node, claim)


def _admit(domain: ComputeDomain, node: Node, claim: ClaimRef) -> Admission:
    held = DomainClaim.objects.filter(claim_uid=claim.uid, released_at__isnull=True).first()
    if held is not None and held.node_id != node.pk:
        raise Conflict(f"{claim} is already prepared on another tray (node {held.node_id})")
    if domain.phase not in ADMITTING_PHASES:
        raise Conflict(f"{claim}: ComputeDomain {domain} is {domain.phase}; it takes no new pods")
    member = (
        DomainMember.objects.filter(domain=domain, node=node, active=True)
        .select_related("node")
        .first()
    )
    joined = False
    if member is None:
        hosts = ", ".join(
            domain.members.filter(active=True)
            .order_by("index")
            .values_list("node__hostname", flat=True)[:18]
        )
        raise Conflict(
            f"{claim}: tray {node.hostname} is not one of the trays placed for ComputeDomain "
            f"{domain} ({hosts or 'none yet'}): run the pods with the domain's manifests, "
            "which keep them on those trays"
        )
    if held is None:
        DomainClaim.objects.create(
            domain=domain,
            node=node,
            claim_uid=claim.uid,
            namespace=claim.namespace,
            name=claim.name,
        )
        record_event(
            actor=Actor.for_agent(node),
            verb="claim.prepared",
            obj=domain,
            node=node,
            message=f"{claim} on {node.hostname}",
            details={"claim_uid": claim.uid, "index": member.index},
        )
    return Admission(domain=domain, member=member, joined=joined)


def claim_release(*, node: Node, claim_uid: str) -> ComputeDomain:
    """The claim was unprepared on the tray. NotFound when the tray holds no such claim."""
    with transaction.atomic():
        held = (
            DomainClaim.objects.filter(claim_uid=claim_uid, node=node, released_at__isnull=True)
            .order_by()
            .first()
        )
        if held is None:
            raise NotFound(f"tray {node.hostname} holds no prepared claim {claim_uid}")
        domain = lock_domain(held.domain_id)
        assert domain is not None  # the claim's foreign key keeps it
        DomainClaim.objects.filter(pk=held.pk).update(released_at=timezone.now())
        record_event(
            actor=Actor.for_agent(node),
            verb="claim.unprepared",
            obj=domain,
            node=node,
            message=f"ResourceClaim {held.namespace}/{held.name} on {node.hostname}",
            details={"claim_uid": claim_uid},
        )
        return domain
