"""A domain that follows its workload, past its formation deadline: the trays whose own IMEX
daemon never became ready are dropped, so that the others form without them
(docs/kubernetes.md, "A joiner that never gets ready")."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from domains.audit.events import CONTROLLER, record_event
from domains.computedomains.claims import (
    DAEMON_READY,
    announce_membership,
    release_empty_cliques,
)
from domains.computedomains.models import (
    ComputeDomain,
    DomainClaim,
    DomainMember,
    MemberState,
    Phase,
)
from domains.computedomains.phases import aggregate, lock_domain, release_member, transition


def drop_stuck_joiners(*, domain_id: int, now: datetime | None = None) -> int:
    """The formation deadline passed for a domain that follows its workload: the trays whose
    own IMEX daemon never became ready are dropped, so the others can form without them.

    Such a tray leaves the domain (its agent tears down as for a leave), its claims are let
    go of with a refusal that every later prepare is answered with (delete the pod so it is
    scheduled again; cordon the tray if its daemon keeps failing), and the domain gets a new
    deadline. Returns how many trays were dropped; 0 when it cannot tell whom to blame (no
    member is stuck before its own daemon, or every member is): the caller then fails the
    domain as for a placed one.
    """
    now = now or timezone.now()
    with transaction.atomic():
        domain = lock_domain(domain_id)
        if (
            domain is None
            or not domain.follows_workload
            or domain.phase != Phase.FORMING
            or domain.formation_deadline is None
            or domain.formation_deadline >= now
        ):
            return 0
        members = list(domain.members.filter(active=True).select_related("node"))
        stuck = [
            m for m in members if m.state != MemberState.READY and m.daemon_state != DAEMON_READY
        ]
        if not stuck or len(stuck) == len(members):
            return 0
        deadline = settings.PORTAL["FORMATION_DEADLINE"]
        for member in sorted(stuck, key=lambda m: m.index):
            _drop(domain, member, deadline, now)
        transition(  # the members' events, recorded by _drop, tell the change
            domain,
            Phase.FORMING,
            Phase.FORMING,
            verb=None,
            bump=True,
            formation_deadline=now + deadline,
            reason="Forming",
            message=f"dropped {', '.join(m.node.hostname for m in stuck)}: IMEX daemon not "
            "ready by the formation deadline",
        )
        release_empty_cliques(domain)  # a clique whose every tray was stuck
        aggregate(domain)
        for clique_id in {m.clique_id for m in stuck}:
            dropped = [m.node_id for m in stuck if m.clique_id == clique_id]
            announce_membership(domain, dropped, clique_id)
    return len(stuck)


def _drop(domain: ComputeDomain, member: DomainMember, deadline: timedelta, now: datetime) -> None:
    node = member.node
    said = member.message or member.daemon_state or "nothing: its agent never reported"
    why = (
        f"tray {node.hostname} was dropped from ComputeDomain {domain}: its IMEX daemon was not "
        f"ready {deadline.total_seconds():.0f} s after it joined (agent said: {said}); the "
        f"other trays carry on without it. Delete this pod so that it is scheduled again, "
        f"and cordon {node.hostname} (see its page in the portal) if its daemon keeps failing"
    )
    release_member(member, message=f"dropped: IMEX daemon not ready by the deadline ({said})")
    DomainClaim.objects.filter(domain=domain, node=node, released_at__isnull=True).update(
        released_at=now, refusal=why[:4000]
    )
    record_event(
        actor=CONTROLLER,
        verb="member.dropped",
        obj=domain,
        node=node,
        message=f"{node.hostname} #{member.index} dropped: IMEX daemon not ready by the "
        f"formation deadline ({said})",
        details={"index": member.index, "step": member.step, "message": member.message},
    )
