"""Claims let go of without their tray's word: the tray is lost, or no pod holds them any
more (docs/features.md, "When a tray fails").

Only the agent on a tray unprepares what it prepared (its checkpoint), and a tray that never
comes back never does: its claims (and, for a domain that follows its workload, its
membership, with an index and a share of the quota) would be held until the domain is
released. The controller releases them instead, each with an audit event and the reason
every later prepare of that claim is refused with:

- a claim on a tray that is lost (marked down, gone from Kubernetes, its agent silent past
  PORTAL_FAILOVER_GRACE_S), or that no longer serves the claim's domain (replaced);
- with Kubernetes on (`domains.kube.claimsweep`), a claim whose ResourceClaim is gone or
  that no pod holds any more.

A domain that follows its workload lets the tray go with its last claim, as when its agent
unprepares it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from domains.audit.events import CONTROLLER, record_event
from domains.computedomains.claims import tray_leave
from domains.computedomains.models import ComputeDomain, DomainClaim, DomainMember
from domains.computedomains.phases import lock_domain
from domains.computedomains.selectors import RUNNING_PHASES
from domains.computedomains.traytruth import lost_q, lost_words
from domains.inventory.models import Node

RELEASED_VERB = "claim.released"


def claims_release_lost(*, now: datetime | None = None) -> int:
    """Release every claim on a lost tray or on one that no longer serves the claim's
    domain; returns how many."""
    now = now or timezone.now()
    serving = DomainMember.objects.filter(
        domain=OuterRef("domain"), node=OuterRef("node"), active=True
    )
    held = (
        DomainClaim.objects.filter(released_at__isnull=True)
        .filter(lost_q("node__", now=now) | ~Exists(serving))
        .values_list("domain_id", "pk")
    )
    by_domain: dict[int, list[int]] = defaultdict(list)
    for domain_id, claim_id in held:
        by_domain[domain_id].append(claim_id)
    return sum(
        claims_release(domain_id=domain_id, claim_ids=ids, why=None, now=now)
        for domain_id, ids in by_domain.items()
    )


def claims_release(
    *, domain_id: int, claim_ids: list[int], why: str | None, now: datetime | None = None
) -> int:
    """Release these claims of one domain, saying `why` (None: the tray's loss, or its
    leaving the domain), in one transaction; returns how many were still held."""
    now = now or timezone.now()
    with transaction.atomic():
        domain = lock_domain(domain_id)
        if domain is None:
            return 0
        claims = list(
            DomainClaim.objects.select_related("node")
            .filter(pk__in=claim_ids, domain=domain, released_at__isnull=True)
            .order_by("pk")
        )
        for claim in claims:
            claim_drop(domain, claim, why or _why(domain, claim.node), now)
        return len(claims)


def claims_drop_on(domain: ComputeDomain, node: Node, why: str, now: datetime) -> int:
    """Release the domain's claims on `node` (the caller holds the domain's lock)."""
    claims = list(
        DomainClaim.objects.select_related("node").filter(
            domain=domain, node=node, released_at__isnull=True
        )
    )
    for claim in claims:
        claim_drop(domain, claim, why, now)
    return len(claims)


def claim_drop(domain: ComputeDomain, claim: DomainClaim, why: str, now: datetime) -> None:
    """One claim let go of by the controller (the caller holds the domain's lock): its audit
    event; every later prepare of it is refused saying why; a domain that follows its
    workload lets the tray go with its last claim."""
    refusal = (
        f"it was released by the portal: {why}. Delete the pod so that it is scheduled "
        "again on a tray that serves the domain"
    )
    DomainClaim.objects.filter(pk=claim.pk).update(released_at=now, refusal=refusal[:4000])
    record_event(
        actor=CONTROLLER,
        verb=RELEASED_VERB,
        obj=domain,
        node=claim.node,
        message=f"ResourceClaim {claim.namespace}/{claim.name} on {claim.node.hostname} "
        f"released: {why}"[:500],
        details={"claim_uid": str(claim.claim_uid), "nodes": [claim.node.hostname]},
    )
    others = DomainClaim.objects.filter(
        domain=domain, node=claim.node, released_at__isnull=True
    ).exclude(pk=claim.pk)
    if domain.follows_workload and domain.phase in RUNNING_PHASES and not others.exists():
        tray_leave(domain, claim.node)


def _why(domain: ComputeDomain, node: Node) -> str:
    serves = DomainMember.objects.filter(domain=domain, node=node, active=True).exists()
    if not serves:
        return f"tray {node.hostname} no longer serves ComputeDomain {domain}"
    return lost_words(node)
