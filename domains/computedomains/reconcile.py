"""The periodic controller: deadlines, leases, silent agents and whatever got lost.

The database is the source of truth, so a reconcile pass can rebuild every decision a lost
message or a killed worker did not make: it queries for domains whose phase disagrees with
their members, deadlines or leases and calls the same services the event-driven path uses.
Each fix is its own short transaction; a pass never holds a lock for long.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from domains.audit.events import CONTROLLER, record_event
from domains.computedomains import ensembles
from domains.computedomains.claimsweep import claims_release_lost
from domains.computedomains.dropping import drop_stuck_joiners
from domains.computedomains.failover import domains_replace_lost
from domains.computedomains.models import ComputeDomain, DomainMember, MemberState, Phase
from domains.computedomains.phases import (
    aggregate,
    domain_fail,
    lock_domain,
    release_member,
    request_id_from,
    set_reason,
)
from domains.computedomains.placing import domains_place_queued
from domains.computedomains.selectors import RUNNING_PHASES
from domains.computedomains.services import domain_release
from domains.inventory.models import NodeState

log = logging.getLogger(__name__)


def reconcile(*, now: datetime | None = None) -> dict[str, int]:
    """One pass; returns what it did, by kind (for logs and tests)."""
    now = now or timezone.now()
    done = {
        "expired": _release_expired_leases(now),
        "deadline": _fail_late_formations(now),
        "aggregated": _aggregate_out_of_step(),
        # Heartbeats are stamped with the clock, not with `now` (a pass run for a later
        # moment, to reach a deadline, must not find every tray lost).
        "replaced": domains_replace_lost(),
        "claims": claims_release_lost(),
    }
    _note_slow_releases(now)
    done["placed"] = domains_place_queued()
    if any(done.values()):
        log.info("reconcile: %s", done)
    return done


def _release_expired_leases(now: datetime) -> int:
    expired = ComputeDomain.objects.filter(phase__in=RUNNING_PHASES, lease_expires_at__lt=now)
    count = 0
    for domain in expired:
        with request_id_from(domain):
            domain_release(actor=CONTROLLER, domain=domain, reason="lease expired")
        count += 1
    return count


def _fail_late_formations(now: datetime) -> int:
    """A domain that follows its workload first drops the trays stuck before their own
    daemon (the others form without them); any other late formation fails."""
    late = ComputeDomain.objects.filter(phase=Phase.FORMING, formation_deadline__lt=now)
    count = 0
    for pk, num_nodes in late.values_list("id", "num_nodes"):
        if num_nodes == 0 and drop_stuck_joiners(domain_id=pk, now=now):
            count += 1
            continue
        count += fail_formation(domain_id=pk)
    return count


def _aggregate_out_of_step() -> int:
    count = 0
    for domain_id in _out_of_step().values_list("id", flat=True):
        with transaction.atomic():
            domain = lock_domain(domain_id)
            if domain is None:
                continue
            with request_id_from(domain):
                _release_down_members(domain)
                aggregate(domain)
            count += 1
    return count


def _out_of_step() -> QuerySet[ComputeDomain]:
    """Domains whose phase disagrees with their members (a report's effect got lost)."""
    active = DomainMember.objects.filter(domain=OuterRef("pk"), active=True)
    not_ready = active.exclude(state=MemberState.READY)
    down = active.filter(node__state=NodeState.DOWN)
    return ComputeDomain.objects.filter(
        Q(phase=Phase.FORMING, members__isnull=False) & ~Exists(not_ready)
        | Q(phase=Phase.READY) & Exists(not_ready)
        | Q(phase=Phase.DEGRADED) & ~Exists(not_ready)
        | Q(phase=Phase.RELEASING) & (~Exists(active) | Exists(down))
    ).distinct()


def _release_down_members(domain: ComputeDomain) -> None:
    if domain.phase != Phase.RELEASING:
        return
    for member in domain.members.filter(active=True, node__state=NodeState.DOWN):
        release_member(member, message="tray declared down by an operator")


def fail_formation(*, domain_id: int) -> bool:
    """The formation deadline passed: Failed, naming the node, its step and last message."""
    members = list(
        DomainMember.objects.select_related("node")
        .filter(domain_id=domain_id, active=True)
        .exclude(state=MemberState.READY)
        .order_by("index")
    )
    stuck = members[0] if members else None
    # In a domain over several cliques, which clique's ensemble did not form.
    where = _clique_of(stuck, domain_id) if stuck else ""
    # An agent that reports but cannot fetch its desired state says why (its link_error).
    link = str((stuck.node.agent_report or {}).get("link_error") or "") if stuck else ""
    says = f"; its agent says: {link}" if link else ""
    if stuck is None:
        message = "formation deadline passed"
    elif not stuck.step and not stuck.generation_applied:
        message = (
            f"formation deadline passed: {where}{stuck.node.hostname} (#{stuck.index}) never "
            "reported" + (says or "; its agent may be down")
        )
    else:
        said = f"; agent said: {stuck.message}" if stuck.message else ""
        message = (
            f"formation deadline passed: {where}{stuck.node.hostname} (#{stuck.index}) stuck at "
            f"step {stuck.step or stuck.state}{said}{says}"
        )
    details = {
        "stuck": [
            {"node": m.node.hostname, "index": m.index, "step": m.step, "message": m.message}
            for m in members
        ]
    }
    domain = domain_fail(
        domain_id=domain_id, reason="FormationTimeout", message=message, details=details
    )
    return domain is not None


def _clique_of(stuck: DomainMember, domain_id: int) -> str:
    """'clique r002-c0 (rack r002): ' when the domain spans several cliques, else ""."""
    everyone = list(DomainMember.objects.filter(domain_id=domain_id, active=True).only("clique_id"))
    where = ensembles.where_not_ready([stuck], everyone)
    return f"{where}: " if where else ""


def silent_words(member: DomainMember) -> str:
    """What is known of a member whose agent went silent, as its tenant reads it."""
    seen = member.node.last_heartbeat
    since = f" since {seen:%H:%M:%S} UTC" if seen else ""
    daemon = member.daemon_state or member.node.daemon_state
    last = f"; its IMEX daemon was last {daemon}" if daemon else ""
    return f"its agent has not reported{since}{last}"


def _note_slow_releases(now: datetime) -> None:
    """A release past RELEASE_DEADLINE names the trays that have not confirmed clean."""
    late = now - settings.PORTAL["RELEASE_DEADLINE"]
    for domain in ComputeDomain.objects.filter(
        phase=Phase.RELEASING, release_requested_at__lt=late
    ).exclude(reason="ReleaseStuck"):
        hosts = list(
            domain.members.filter(active=True).values_list("node__hostname", flat=True)[:5]
        )
        message = (
            f"still waiting for {', '.join(hosts)} to confirm a clean tray; an operator can "
            "mark a dead tray down to finish the release"
        )
        set_reason(
            domain,
            "ReleaseStuck",
            message,
            phase=Phase.RELEASING,
            verb="domain.release_stuck",
            now=now,
        )


def reap_stale_heartbeats(*, now: datetime | None = None) -> int:
    """Ready members whose agent has been silent past HEARTBEAT_STALE_AFTER → `silent` (not
    failed: their daemon may serve on), so their domain turns Degraded naming the tray and
    saying what is known. The agent's next report brings the member back; a placed domain's
    tray silent past FAILOVER_GRACE is replaced (`failover`)."""
    now = now or timezone.now()
    stale_before = now - settings.PORTAL["HEARTBEAT_STALE_AFTER"]
    silent = (
        DomainMember.objects.filter(
            active=True,
            state=MemberState.READY,
            domain__phase__in=(Phase.READY, Phase.DEGRADED),
        )
        .filter(Q(node__last_heartbeat__lt=stale_before) | Q(node__last_heartbeat__isnull=True))
        .values_list("domain_id", "id")
    )
    by_domain: dict[int, list[int]] = {}
    for domain_id, member_id in silent:
        by_domain.setdefault(domain_id, []).append(member_id)
    for domain_id, member_ids in by_domain.items():
        _mark_silent(domain_id, member_ids, now)
    return sum(len(ids) for ids in by_domain.values())


def _mark_silent(domain_id: int, member_ids: list[int], now: datetime) -> None:
    with transaction.atomic():
        domain = lock_domain(domain_id)
        if domain is None:
            return
        members = DomainMember.objects.select_related("node").filter(
            pk__in=member_ids, active=True, state=MemberState.READY
        )
        for member in members:
            message = silent_words(member)
            DomainMember.objects.filter(pk=member.pk).update(
                state=MemberState.SILENT, message=message, state_changed_at=now
            )
            member.state, member.message = MemberState.SILENT, message
            record_event(
                actor=CONTROLLER,
                verb="member.silent",
                obj=domain,
                node=member.node,
                message=f"{member.node.hostname} #{member.index}: {message}",
            )
        aggregate(domain)
