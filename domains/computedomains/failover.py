"""Failover for placed domains: a tray lost to its domain is replaced by a free tray of the
same clique, formed in, and the workload's replacement pod can land there.

A tray is lost (`traytruth.lost_q`) when an operator marked it down, when it vanished from
Kubernetes, or when its agent has been silent past PORTAL_FAILOVER_GRACE_S. For a domain
placed with `numNodes` ≥ 1 and `replace: auto` (the default) the controller then, in one
transaction under the placement lock:

- picks a free tray of the lost one's clique that fits the domain (GPUs per tray, no
  maintenance before its lease ends), from the tightest run of free slots: the domain's
  placement constraint (a clique or a rack) still holds, since the clique is the same;
- checks the namespace's quota (the domain's size does not change, so it needs no new
  approval; a quota an admin lowered under what the namespace holds stops it);
- lets go of the lost tray (its member released, its claims released: `claimsweep`), gives
  the new tray the lost one's index, and bumps the generation, so every member fetches the
  new peer list (a placed domain's nodes file lists its trays' addresses: the members that
  stay start their daemons again to read it, as IMEX reads it only at start) and the new
  tray's agent forms it in. Its tenant reads "gb-r01-t03 replaced by gb-r01-t11" at once;
- on Kubernetes, the lost tray's ResourceSlice is withdrawn (`domains.kube`), and the new
  tray's slice names the domain as soon as its agent has fetched it: the domain's claim
  template selects the trays whose slice names it, so the workload's replacement pod is
  scheduled onto the new tray and never onto the lost one.

Where no tray is free the domain stays Degraded and says what it waits for (reason
`WaitingForTray`); the next pass tries again. With `replace: manual` it says that an
operator picks the tray (`member_replace` with a hostname), or none.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from domains.audit.events import CONTROLLER, Actor
from domains.computedomains.admission import quota_of
from domains.computedomains.claimsweep import claims_drop_on
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.models import (
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
    ReplacePolicy,
)
from domains.computedomains.phases import (
    WAITING_FOR_TRAY,
    aggregate,
    lock_domain,
    release_member,
    set_reason,
    transition,
)
from domains.computedomains.placing import lock_placement, placement_request
from domains.computedomains.selectors import RUNNING_PHASES, quota_usage
from domains.computedomains.traytruth import lost_q, lost_words
from domains.errors import InvalidInput, InvalidTransition
from domains.placement.algorithm import breakdown, replacement_tray
from domains.placement.model import CliqueView, PlacementRequest, Tray
from domains.signals import (
    announce_desired_state,
    announce_nodes,
    announce_trays_dropped,
)

REPLACED_VERB = "domain.member_replaced"
WAITING_VERB = "domain.waiting_for_tray"


@dataclass(frozen=True)
class Replacement:
    old: str  # the lost tray's hostname
    new: str  # the tray that took its place
    index: int


def domains_replace_lost(*, now: datetime | None = None) -> int:
    """One pass over every placed domain with a lost tray; returns how many were replaced."""
    now = now or timezone.now()
    lost = (
        DomainMember.objects.filter(
            active=True, domain__num_nodes__gt=0, domain__phase__in=RUNNING_PHASES
        )
        .filter(lost_q("node__", now=now))
        .order_by("domain_id", "index")
        .values_list("domain_id", "pk")
    )
    by_domain: dict[int, list[int]] = defaultdict(list)
    for domain_id, member_id in lost:
        by_domain[domain_id].append(member_id)
    replaced = 0
    for domain_id, member_ids in by_domain.items():
        for member_id in member_ids:
            if member_replace(domain_id=domain_id, member_id=member_id, now=now) is None:
                break  # the domain waits (nothing free, or an operator picks): say it once
            replaced += 1
    return replaced


def member_replace(
    *,
    domain_id: int,
    member_id: int,
    actor: Actor = CONTROLLER,
    hostname: str = "",
    now: datetime | None = None,
) -> Replacement | None:
    """Replace a lost member of a placed domain with a free tray of its clique (`hostname`:
    the one an operator picked; any lost or not). None when the domain waits instead (it
    says for what) or the member no longer needs replacing. Raises InvalidInput / Conflict
    for an operator's pick that cannot be taken, naming why."""
    now = now or timezone.now()
    with transaction.atomic():
        lock_placement()
        domain = lock_domain(domain_id)
        member = _lost_member(domain, member_id, picked=bool(hostname), now=now)
        if domain is None or member is None:
            return None
        if domain.replace_policy == ReplacePolicy.MANUAL and not hostname:
            _wait(domain, member, "its trays are replaced by an operator (replace: manual)")
            return None
        request = _request(domain, now)
        clique = _clique_of(member)
        free = clique.trays_for(request) if clique else []
        if hostname:
            free = _picked(free, hostname, clique)
        refusal = _quota_refusal(domain)
        tray = None if refusal else replacement_tray(free)
        if tray is None:
            _wait(domain, member, refusal or _nothing_free(clique, request))
            return None
        return _swap(domain, member, tray, actor, now)


def domain_tray_replace(
    *, actor: Actor, domain: ComputeDomain, tray: str, with_: str
) -> Replacement:
    """An operator replaces a tray of a placed domain with a free one of its clique they
    picked (a domain with `replace: manual`, or any other): InvalidInput naming the field,
    or InvalidTransition saying why not."""
    if domain.follows_workload:
        raise InvalidTransition(
            f"ComputeDomain {domain} follows its workload: its trays come and go with its pods"
        )
    member = DomainMember.objects.filter(domain=domain, active=True, node__hostname=tray).first()
    if member is None:
        raise InvalidInput(f"{tray} is not a tray of ComputeDomain {domain}", field="tray")
    if not with_:
        raise InvalidInput("name the free tray to take its place", field="with")
    done = member_replace(domain_id=domain.pk, member_id=member.pk, actor=actor, hostname=with_)
    if done is None:
        domain.refresh_from_db()
        raise InvalidTransition(
            f"ComputeDomain {domain} is {domain.phase}"
            + (f": {domain.message}" if domain.message else "")
        )
    return done


def _lost_member(
    domain: ComputeDomain | None, member_id: int, *, picked: bool, now: datetime
) -> DomainMember | None:
    if domain is None or domain.follows_workload or domain.phase not in RUNNING_PHASES:
        return None
    members = DomainMember.objects.select_related("node").filter(
        pk=member_id, domain=domain, active=True
    )
    if not picked:
        members = members.filter(lost_q("node__", now=now))
    return members.first()


def _request(domain: ComputeDomain, now: datetime) -> PlacementRequest:
    """One tray for the domain, held until its lease ends (maintenance before then rules a
    tray out)."""
    until = domain.lease_expires_at.timestamp() if domain.lease_expires_at else math.inf
    return replace(placement_request(domain, at=now), num_nodes=1, until=until)


def _clique_of(member: DomainMember) -> CliqueView | None:
    return next((c for c in topology_snapshot().cliques if c.clique_id == member.clique_id), None)


def _picked(free: list[Tray], hostname: str, clique: CliqueView | None) -> list[Tray]:
    chosen = [t for t in free if t.hostname == hostname]
    if not chosen:
        where = f"clique {clique.name}" if clique else "the lost tray's clique"
        raise InvalidInput(
            f"{hostname} is not a free tray of {where} that fits the domain", field="with"
        )
    return chosen


def _quota_refusal(domain: ComputeDomain) -> str:
    """Why the namespace's quota stops a replacement ("" when it does not): the swap keeps
    the domain's size, so only a quota lowered under what the namespace holds does."""
    quota, usage = quota_of(domain.namespace), quota_usage(domain.namespace)
    for what, used, limit in (
        ("trays", usage["nodes"], quota.max_nodes),
        ("GPUs", usage["gpus"], quota.max_gpus),
    ):
        if limit is not None and used > limit:
            return (
                f"namespace {domain.namespace.name} holds more {what} than its quota allows "
                f"({used} > {limit}): an admin must raise it before a tray is replaced"
            )
    return ""


def _nothing_free(clique: CliqueView | None, request: PlacementRequest) -> str:
    if clique is None:
        return "its clique has no tray left"
    return f"no free tray in clique {clique.name} ({breakdown(clique, request)})"


def _wait(domain: ComputeDomain, member: DomainMember, why: str) -> None:
    """The domain stays (or turns) Degraded and says what it waits for, once per story."""
    if member.state == MemberState.READY:  # lost before the reaper looked: not ready now
        DomainMember.objects.filter(pk=member.pk).update(state=MemberState.FAILED)
        member.state = MemberState.FAILED
        aggregate(domain)
    message = f"{lost_words(member.node)}; waiting for a replacement: {why}"
    set_reason(
        domain,
        WAITING_FOR_TRAY,
        message,
        verb=WAITING_VERB,
        says=message[:500],
        details={"nodes": [member.node.hostname], "index": member.index},
    )


def _swap(
    domain: ComputeDomain, member: DomainMember, tray: Tray, actor: Actor, now: datetime
) -> Replacement:
    old = member.node
    why = lost_words(old)
    release_member(member, message=f"replaced by {tray.hostname}: {why}", now=now)
    claims_drop_on(domain, old, f"{why}; {old.hostname} was replaced by {tray.hostname}", now)
    DomainMember.objects.create(
        domain=domain,
        node_id=tray.node_id,
        index=member.index,
        clique_id=member.clique_id,
        ip_address=tray.ip,
    )
    says = f"{old.hostname} replaced by {tray.hostname} ({why})"
    phase = Phase.FORMING if domain.phase == Phase.FORMING else Phase.DEGRADED
    transition(
        domain,
        domain.phase,
        phase,
        verb=REPLACED_VERB,
        actor=actor,
        says=says,
        node=old,
        details=lambda d: {
            "nodes": [old.hostname, tray.hostname],
            "old": old.hostname,
            "new": tray.hostname,
            "index": member.index,
            "generation": d.generation,
        },
        bump=True,
        reason="Replacing",
        message=f"{says}; forming it in",
    )
    members = list(domain.members.filter(active=True).values_list("node_id", flat=True))
    announce_nodes([old.pk, tray.node_id])
    announce_desired_state([old.pk, *members])
    announce_trays_dropped([old.pk])
    return Replacement(old=old.hostname, new=tray.hostname, index=member.index)
