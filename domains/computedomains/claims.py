"""DRA claims on trays: the node agent asks before it prepares a claim, and says when it
has unprepared one (docs/architecture.md, "Kubernetes").

A pod that names a domain's ResourceClaimTemplate gets a claim; the scheduler allocates it
to the `channel` device of the tray it picks, and that tray's agent calls `claim_admit`
before it hands the channel to the pod. The portal checks that the claim's namespace owns
the domain and that the tray serves it: a *placed* domain admits only its member trays; a
domain that *follows its workload* (`numNodes: 0`) lets a tray of one of its cliques join,
if it may (domains/computedomains/following.py). Every refusal says what to do, and leaves
nothing behind.

`claim_release` is the unprepare: the claim is let go of, and for a domain that follows its
workload the tray's last claim takes it out of the domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentwire.messages import ClaimRef
from domains.audit.events import Actor, record_event
from domains.computedomains import admission
from domains.computedomains.following import join_refusal
from domains.computedomains.models import (
    AllocationMode,
    ChannelAllocation,
    ComputeDomain,
    DomainClaim,
    DomainMember,
    Phase,
)
from domains.computedomains.phases import (
    WAITING_FOR_WORKLOAD,
    WAITING_MESSAGE,
    aggregate,
    lock_domain,
    release_member,
    transition,
)
from domains.computedomains.selectors import RUNNING_PHASES, quota_usage
from domains.errors import Conflict, NotFound, QuotaExceeded
from domains.inventory.models import Node, NodeCondition
from domains.signals import (
    announce_desired_state,
    announce_domain,
    announce_nodes,
    announce_peers_changed,
)
from domains.tenancy.models import Namespace, Quota

DAEMON_READY = "READY"  # the `nvidia-imex-ctl -q` word of a daemon that serves
# Phases in which a claim may be prepared (a releasing domain takes no new pods).
ADMITTING_PHASES = (Phase.ADMITTED, Phase.FORMING, Phase.READY, Phase.DEGRADED)


def claim_title(claim: ClaimRef) -> str:
    """How a refusal or an event names the claim."""
    return f"ResourceClaim {claim['namespace']}/{claim['name']}"


@dataclass(frozen=True)
class Admission:
    domain: ComputeDomain
    # None: the tray is in no NVLink clique; the claim is prepared without a channel.
    member: DomainMember | None
    joined: bool  # this claim made the tray a member


def claim_admit(
    *, node: Node, claim: ClaimRef, domain_uid: str, may_join: bool = True
) -> Admission:
    """Admit the claim on the tray (joining it to a domain that follows its workload).

    Idempotent: the kubelet repeats prepares, so a claim already admitted here is answered
    again. Raises NotFound (no such live domain in the claim's namespace) or Conflict (the
    tray may not serve it), each naming what to change. `may_join`: whether the claim may
    make the tray a member of a domain that follows its workload (the caller checked it
    with Kubernetes, or the policy allows unchecked joins: domains/kube/claimcheck.py).
    """
    with transaction.atomic():
        found = (
            ComputeDomain.objects.select_related("namespace")
            .filter(uid=domain_uid)
            .order_by()
            .first()
        )
        # Another namespace's domain is answered as one that does not exist: a refusal
        # names nothing of another tenant, not even that the uid is taken.
        if found is None or not found.is_live or found.namespace.name != claim["namespace"]:
            raise NotFound(
                f"{claim_title(claim)}: namespace {claim['namespace']} has no live ComputeDomain "
                f"{domain_uid}; a claim can only use a live domain of its own namespace (is the "
                "claim's ResourceClaimTemplate one of a domain that is gone?)"
            )
        domain = lock_domain(found.pk)
        assert domain is not None  # the row exists: we just read it
        return _admit(domain, node, claim, may_join=may_join)


def _held(claim: ClaimRef) -> DomainClaim | None:
    """The claim's admission that still holds a tray, if any."""
    live = DomainClaim.objects.filter(claim_uid=claim["uid"], released_at__isnull=True)
    return live.select_related("node").first()


def _admit(domain: ComputeDomain, node: Node, claim: ClaimRef, *, may_join: bool) -> Admission:
    held = _held(claim)
    if held is None:
        refused = (
            DomainClaim.objects.filter(claim_uid=claim["uid"], domain=domain)
            .exclude(refusal="")
            .values_list("refusal", flat=True)
            .first()
        )
        if refused:
            raise Conflict(f"{claim_title(claim)}: {refused}")
    if held is not None and held.node_id != node.pk:
        raise Conflict(
            f"{claim_title(claim)} is already prepared on another tray, {held.node.hostname}"
        )
    if domain.phase not in ADMITTING_PHASES:
        raise Conflict(
            f"{claim_title(claim)}: ComputeDomain {domain} is {domain.phase}; it takes no new pods"
        )
    if _without_fabric(node):
        return _admit_without_channel(domain, node, claim, held)
    member = (
        DomainMember.objects.filter(domain=domain, node=node, active=True)
        .select_related("node")
        .first()
    )
    joined = False
    if member is None and domain.follows_workload and not may_join:
        raise Conflict(
            f"{claim_title(claim)}: tray {node.hostname} may not join a domain that follows its "
            "workload on an unchecked claim: the portal checks claims with Kubernetes (its "
            "Kubernetes integration is off, and PORTAL_UNVERIFIED_JOINS does not allow it)"
        )
    if member is None and domain.follows_workload:
        member, joined = _join(domain, node, claim), True
    elif member is None:
        # Which trays were placed is the tenant's to see on its domain's page, not something
        # a tray's agent is told (its claim's namespace is the agent's word).
        raise Conflict(
            f"{claim_title(claim)}: tray {node.hostname} is not one of the trays placed for the "
            "claim's ComputeDomain: run the pods with the domain's manifests, which keep them on "
            "those trays"
        )
    if held is None:
        _record(domain, node, claim, index=member.index)
    return Admission(domain=domain, member=member, joined=joined)


def _without_fabric(node: Node) -> bool:
    """A tray in no NVLink clique for good: no clique, and nothing (a blocking condition:
    fabric registration unfinished, NVML away) says it may be in one once it settles."""
    if node.clique_id is not None:
        return False
    return not NodeCondition.objects.filter(node=node, blocking=True).exists()


def _admit_without_channel(
    domain: ComputeDomain, node: Node, claim: ClaimRef, held: DomainClaim | None
) -> Admission:
    """As NVIDIA's driver prepares a claim on a node that is not fabric-attached: the pod
    runs, without an IMEX channel (it can share no GPU memory over NVLink), and the tray
    joins no IMEX domain; its claim is recorded, so the domain's status lists the tray."""
    if held is None:
        _record(domain, node, claim, index=-1)
    return Admission(domain=domain, member=None, joined=False)


def _record(domain: ComputeDomain, node: Node, claim: ClaimRef, *, index: int) -> None:
    DomainClaim.objects.create(
        domain=domain,
        node=node,
        claim_uid=claim["uid"],
        namespace=claim["namespace"],
        name=claim["name"],
    )
    without = " (in no NVLink clique: without an IMEX channel)" if index < 0 else ""
    record_event(
        actor=Actor.for_agent(node),
        verb="claim.prepared",
        obj=domain,
        node=node,
        message=f"{claim_title(claim)} on {node.hostname}{without}",
        details={"claim_uid": claim["uid"], "index": index},
    )
    announce_domain(domain)  # its published status lists the trays its pods are on


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
        others = DomainClaim.objects.filter(domain=domain, node=node, released_at__isnull=True)
        if domain.follows_workload and domain.phase in RUNNING_PHASES and not others.exists():
            tray_leave(domain, node)
        announce_domain(domain)  # its published status lists the trays its pods are on
        return domain


# --- a domain that follows its workload -------------------------------------------------------


def _join(domain: ComputeDomain, node: Node, claim: ClaimRef) -> DomainMember:
    """The tray becomes a member with the lowest free index of its clique, if it may.

    The checks the portal makes before placing a tray, made now: the tray may take a new
    member (`following.join_refusal`); it is in a clique the domain keeps to; the
    namespace's quota has room for one more tray. The first member of a clique creates
    that clique's ensemble: index 0, and (Single mode) a channel from that clique's ledger.
    The caller holds the domain's lock; the namespace row is locked too, as for a request,
    so two joins cannot both take the last unit of quota.
    """
    _check_tray(domain, node, claim)
    namespace = Namespace.objects.select_for_update().get(pk=domain.namespace_id)
    quota = admission.quota_of(namespace)
    clique_id, ip = node.clique_id, node.management_ip
    assert clique_id is not None and ip  # _check_tray refused a tray without them
    _check_clique(domain, node, claim)
    have = domain.members.filter(active=True).count()
    _check_quota(domain, namespace, quota, have, claim)
    taken = set(
        domain.members.filter(active=True, clique_id=clique_id).values_list("index", flat=True)
    )
    index = next(i for i in range(len(taken) + 1) if i not in taken)
    member = DomainMember.objects.create(
        domain=domain, node=node, index=index, clique_id=clique_id, ip_address=ip
    )
    if not taken and domain.allocation_mode == AllocationMode.SINGLE:
        _take_channel(domain, clique_id, node, claim)
    _joined(domain, node, claim, member)
    return member


def _joined(domain: ComputeDomain, node: Node, claim: ClaimRef, member: DomainMember) -> None:
    """The domain is Forming again, until its new member reports."""
    index = member.index
    now = timezone.now()
    deadline = now + settings.PORTAL["FORMATION_DEADLINE"]
    clique = node.clique.label if node.clique else ""
    message = f"{node.hostname} joining as #{index} of clique {clique} for {claim_title(claim)}"
    transition(
        domain,
        (Phase.ADMITTED, *RUNNING_PHASES),
        Phase.FORMING,
        verb="member.joined",
        actor=Actor.for_agent(node),
        says=message,
        node=node,
        details=lambda domain: {
            "index": index,
            "clique": clique,
            "claim_uid": claim["uid"],
            "generation": domain.generation,
        },
        bump=True,
        placed_at=domain.placed_at or now,
        formation_deadline=deadline,
        reason="Forming",
        message=message,
    )
    announce_membership(domain, [node.pk], member.clique_id)


def _check_clique(domain: ComputeDomain, node: Node, claim: ClaimRef) -> None:
    """The tray is in one of the cliques kept when the domain was requested (a domain from
    before that set takes a tray of any clique, as its claim template does)."""
    allowed = {c.pk: c.label for c in domain.cliques.all()}
    if allowed and node.clique_id not in allowed:
        raise Conflict(
            f"{claim_title(claim)}: tray {node.hostname} is in clique "
            f"{node.clique.label if node.clique else ''}, which ComputeDomain {domain} does not "
            f"keep to (its cliques: {', '.join(sorted(allowed.values()))}, fixed when it was "
            "requested; its ResourceClaimTemplate selects only their trays)"
        )


def _check_tray(domain: ComputeDomain, node: Node, claim: ClaimRef) -> None:
    why = join_refusal(node)
    if why:
        raise Conflict(
            f"{claim_title(claim)}: tray {node.hostname} {why}; ComputeDomain {domain} cannot "
            "use it"
        )


def _check_quota(
    domain: ComputeDomain, namespace: Namespace, quota: Quota, have: int, claim: ClaimRef
) -> None:
    if quota.max_nodes_per_domain is not None and have + 1 > quota.max_nodes_per_domain:
        raise QuotaExceeded(
            f"{claim_title(claim)}: ComputeDomain {domain} already holds {have} trays, the most "
            f"a domain may hold in namespace {namespace.name}"
        )
    usage = quota_usage(namespace)
    for what, used, more, limit in (
        ("trays", usage["nodes"], 1, quota.max_nodes),
        ("GPUs", usage["gpus"], domain.gpus_per_node, quota.max_gpus),
    ):
        if limit is not None and used + more > limit:
            raise QuotaExceeded(
                f"{claim_title(claim)}: one more tray for ComputeDomain {domain} would exceed the "
                f"quota of namespace {namespace.name} ({what}: {used} in use + {more} > {limit})"
            )


def _take_channel(domain: ComputeDomain, clique_id: int, node: Node, claim: ClaimRef) -> None:
    """The domain's channel in the tray's clique, whose ensemble it is the first member of
    (Single mode): from that clique's ledger."""
    taken = set(
        ChannelAllocation.objects.filter(clique_id=clique_id, released_at__isnull=True).values_list(
            "channel", flat=True
        )
    )
    free = next(
        (c for c in range(1, settings.PORTAL["IMEX_CHANNEL_COUNT"]) if c not in taken), None
    )
    if free is None:
        raise Conflict(
            f"{claim_title(claim)}: no free IMEX channel left in the clique of {node.hostname}"
        )
    ChannelAllocation.objects.create(clique_id=clique_id, channel=free, domain=domain)


def tray_leave(domain: ComputeDomain, node: Node) -> None:
    """The tray's last claim of the domain is gone: it leaves; the others stay as they are
    (their nodes files do not change: only the hosts mapping and a SIGUSR1, and only in
    its clique). The last member of a clique takes that clique's ensemble with it: its
    channel goes back to the clique's ledger. The caller holds the domain's lock."""
    member = (
        DomainMember.objects.select_related("node")
        .filter(domain=domain, node=node, active=True)
        .first()
    )
    if member is None:
        return
    release_member(member, message="left: the last pod holding its claim is gone")
    remaining = release_empty_cliques(domain)
    fields: dict[str, Any] = {}
    if not remaining:  # back to waiting for its workload
        fields = {
            "reason": WAITING_FOR_WORKLOAD,
            "message": WAITING_MESSAGE,
            "formation_deadline": None,
        }
    transition(
        domain,
        RUNNING_PHASES,
        domain.phase if remaining else Phase.ADMITTED,
        verb="member.left",
        says=f"{node.hostname} #{member.index} left; {len(remaining)} tray(s) remain",
        node=node,
        details=lambda domain: {"index": member.index, "generation": domain.generation},
        bump=True,
        **fields,
    )
    if remaining:
        aggregate(domain)
    announce_membership(domain, [node.pk], member.clique_id)


def release_empty_cliques(domain: ComputeDomain) -> list[int]:
    """A clique's ensemble is gone with its last member: its channel goes back to the
    clique's ledger (the other cliques' stay). The clique of each active member."""
    remaining = list(domain.members.filter(active=True).values_list("clique_id", flat=True))
    ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True).exclude(
        clique_id__in=remaining
    ).update(released_at=timezone.now())
    return remaining


def announce_membership(domain: ComputeDomain, changed: list[int], clique_id: int) -> None:
    """The joining (or leaving) tray hears at once: a pod waits for it. The other members
    of its clique learn the new peer list a moment later, once per burst of that clique
    (`peers_changed`); the other cliques' members are not told. The domain itself was
    announced by its transition."""
    announce_nodes(changed)
    announce_desired_state(changed)
    announce_peers_changed(domain.pk, clique_id)
