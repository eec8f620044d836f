"""Every write to ComputeDomains goes through one of these services (STYLE.md).

Each is keyword-only, runs in one transaction, records an Event and announces the change
after commit. Pages, API actions, Kubernetes sync and tasks all call these; none of them
writes through the ORM itself. The controller's internals (placement, formation, phase
aggregation) live in `formation.py`; the ones callers need are re-exported here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from domains.agents.report import AgentReport, Step
from domains.computedomains import admission
from domains.computedomains.events import (
    CONTROLLER,
    Actor,
    announce_desired_state,
    announce_domain,
    announce_nodes,
    record_event,
)
from domains.computedomains.formation import (
    aggregate,
    domain_fail,
    domain_place,
    domains_place_queued,
    finish_release,
    lock_domain,
    placement_request,
    release_member,
    set_phase,
)
from domains.computedomains.models import (
    NODE_REPORT,
    ApprovalState,
    ComputeDomain,
    DomainMember,
    DomainSource,
    MemberState,
    Phase,
)
from domains.computedomains.specs import DomainSpec, DryRunResult
from domains.context import get_request_id
from domains.errors import InvalidInput, InvalidTransition, NameTaken, QuotaExceeded
from domains.inventory.models import NodeState
from domains.placement import Rejection, place, topology_snapshot
from domains.tenancy.models import Namespace
from domains.tenancy.selectors import quota_usage

__all__ = [
    "DomainSpec",
    "DryRunResult",
    "domain_approve",
    "domain_deny",
    "domain_dry_run",
    "domain_extend_lease",
    "domain_fail",
    "domain_member_report",
    "domain_place",
    "domain_release",
    "domain_request",
    "domains_place_queued",
    "finish_release",
    "placement_request",
]

# Phases whose members hold trays: releasing them needs the agents' confirmation.
HOLDING_PHASES = (Phase.PLACING, Phase.FORMING, Phase.READY, Phase.DEGRADED)
# Phases without trays: a release ends them at once.
QUEUED_PHASES = (Phase.PENDING, Phase.ADMITTED)


def domain_request(
    *,
    actor: Actor,
    namespace: Namespace,
    spec: DomainSpec,
    source: str = DomainSource.PORTAL,
) -> ComputeDomain:
    """Validate, admit against quota (namespace row locked) and queue for placement.

    Returns the new domain: `Admitted` (placement is queued after commit) or `Pending`
    waiting for an admin's approval. Raises InvalidInput / NameTaken (field named) or
    QuotaExceeded; on any error nothing is created.
    """
    with transaction.atomic():
        # The lock makes "count usage, then insert" atomic across concurrent requests.
        namespace = Namespace.objects.select_for_update().get(pk=namespace.pk)
        clean = admission.clean_spec(namespace=namespace, spec=spec)
        quota = admission.quota_of(namespace)
        admission.per_domain_limits(quota=quota, spec=clean)
        problems = admission.quota_problems(quota=quota, usage=quota_usage(namespace), spec=clean)
        if problems:
            raise QuotaExceeded(
                f"over the quota of namespace {namespace.name}: " + "; ".join(problems),
                details={"problems": problems},
            )
        approval = admission.needs_approval(quota=quota, spec=clean, requested_by=actor.user)
        domain = _create(actor, namespace, clean, source, approval)
        if domain.phase == Phase.ADMITTED:
            _enqueue_placement(domain)
        return domain


def _create(
    actor: Actor, namespace: Namespace, clean: admission.CleanSpec, source: str, approval: bool
) -> ComputeDomain:
    now = timezone.now()
    try:
        with transaction.atomic():
            domain = ComputeDomain.objects.create(
                namespace=namespace,
                name=clean.name,
                labels=clean.labels,
                num_nodes=clean.num_nodes,
                gpus_per_node=clean.gpus_per_node,
                allocation_mode=clean.allocation_mode,
                resource_claim_template=clean.resource_claim_template,
                placement_constraint=clean.placement_constraint,
                placement_target=clean.placement_target,
                lifetime=clean.lifetime,
                phase=Phase.PENDING if approval else Phase.ADMITTED,
                approval_state=ApprovalState.PENDING if approval else ApprovalState.NOT_REQUIRED,
                reason="AwaitingApproval" if approval else "Queued",
                message=(
                    f"{clean.num_nodes} trays is above the approval threshold; waiting for an admin"
                    if approval
                    else "admitted; waiting for placement"
                ),
                requested_by=actor.user if actor.user is not None and actor.user.pk else None,
                source=source,
                request_id=get_request_id(),
                admitted_at=None if approval else now,
            )
    except IntegrityError:
        # Only a request racing us for the same name can get here (namespace is locked,
        # so it is one from before the lock was taken): say so the same way.
        raise NameTaken(f"a live domain named {clean.name!r} already exists", field="name")
    details = {
        "num_nodes": clean.num_nodes,
        "gpus_per_node": clean.gpus_per_node,
        "allocation_mode": clean.allocation_mode,
        "placement": f"{clean.placement_constraint} {clean.placement_target}".strip(),
        "lifetime_s": int(clean.lifetime.total_seconds()),
        "source": source,
    }
    record_event(actor=actor, verb="domain.requested", obj=domain, details=details)
    if approval:
        record_event(actor=CONTROLLER, verb="domain.awaiting_approval", obj=domain)
    else:
        record_event(actor=CONTROLLER, verb="domain.admitted", obj=domain)
    announce_domain(domain)
    return domain


def _enqueue_placement(domain: ComputeDomain) -> None:
    from domains.computedomains import tasks

    tasks.place_domain.delay_on_commit(domain.pk)


def domain_dry_run(*, namespace: Namespace, spec: DomainSpec) -> DryRunResult:
    """Validate and say where it would land (or why not) without creating anything.

    Invalid input raises InvalidInput like `domain_request`; quota and capacity problems
    are answered in the result, so the form can show them before submitting.
    """
    clean = admission.clean_spec(namespace=namespace, spec=spec)
    quota = admission.quota_of(namespace)
    usage = quota_usage(namespace)
    problems = admission.quota_problems(quota=quota, usage=usage, spec=clean)
    try:
        admission.per_domain_limits(quota=quota, spec=clean)
    except QuotaExceeded as exc:
        problems.insert(0, exc.message)
    approval = admission.needs_approval(quota=quota, spec=clean)
    result = place(clean.placement_request(), topology_snapshot())
    common = {
        "quota_ok": not problems,
        "needs_approval": approval,
        "quota_problems": problems,
        "quota_impact": admission.quota_impact(quota=quota, usage=usage, spec=clean),
    }
    if isinstance(result, Rejection):
        return DryRunResult(
            placeable=False, message=result.message, reasons=list(result.reasons), **common
        )
    message = f"would be placed on {result.describe()}"
    if problems:
        message = f"fits the fabric, but is over quota: {problems[0]}"
    elif approval:
        message += "; needs an admin's approval first"
    return DryRunResult(
        placeable=True,
        message=message,
        clique=result.clique_label,
        clique_name=result.clique_name,
        rack=result.rack,
        nodes=result.hostnames,
        node_ids=result.node_ids,
        **common,
    )


def domain_approve(*, actor: Actor, domain: ComputeDomain) -> ComputeDomain:
    """An admin lets a request above the threshold go on to placement."""
    with transaction.atomic():
        locked = _locked(domain)
        if locked.approval_state != ApprovalState.PENDING or not set_phase(
            locked,
            Phase.PENDING,
            Phase.ADMITTED,
            approval_state=ApprovalState.APPROVED,
            approved_by=actor.user if actor.user is not None and actor.user.pk else None,
            admitted_at=timezone.now(),
            reason="Queued",
            message=f"approved by {actor.name}; waiting for placement",
        ):
            raise InvalidTransition(f"{locked} is {locked.phase}, not waiting for approval")
        record_event(actor=actor, verb="domain.approved", obj=locked)
        announce_domain(locked)
        _enqueue_placement(locked)
        return locked


def domain_deny(*, actor: Actor, domain: ComputeDomain, reason: str = "") -> ComputeDomain:
    """An admin turns a request down: it ends Failed (reason Denied), quota is freed."""
    with transaction.atomic():
        locked = _locked(domain)
        message = f"denied by {actor.name}" + (f": {reason}" if reason else "")
        if locked.approval_state != ApprovalState.PENDING or not set_phase(
            locked,
            Phase.PENDING,
            Phase.FAILED,
            approval_state=ApprovalState.DENIED,
            failed_at=timezone.now(),
            reason="Denied",
            message=message,
        ):
            raise InvalidTransition(f"{locked} is {locked.phase}, not waiting for approval")
        record_event(actor=actor, verb="domain.denied", obj=locked, message=message)
        announce_domain(locked)
        return locked


def domain_release(*, actor: Actor, domain: ComputeDomain, reason: str = "") -> ComputeDomain:
    """Idempotent: members' desired state becomes absent; Released once all are clean.

    A domain that holds no trays yet (Pending, Admitted) is Released at once. Releasing
    a Released, Failed or already Releasing domain changes nothing and raises nothing.
    """
    with transaction.atomic():
        locked = _locked(domain)
        message = f"release requested by {actor.name}" + (f": {reason}" if reason else "")
        now = timezone.now()
        if locked.phase in QUEUED_PHASES:
            if set_phase(
                locked,
                QUEUED_PHASES,
                Phase.RELEASED,
                release_requested_at=now,
                released_at=now,
                reason="Released",
                message=message,
            ):
                record_event(actor=actor, verb="domain.released", obj=locked, message=message)
                announce_domain(locked)
        elif locked.phase in HOLDING_PHASES:
            _begin_release(locked, actor, message, now)
        return locked


def _begin_release(locked: ComputeDomain, actor: Actor, message: str, now: datetime) -> None:
    if not set_phase(
        locked,
        HOLDING_PHASES,
        Phase.RELEASING,
        bump=True,
        release_requested_at=now,
        reason="Releasing",
        message=message + "; waiting for every agent to confirm a clean node",
    ):
        return
    members = list(locked.members.select_related("node").filter(active=True))
    DomainMember.objects.filter(pk__in=[m.pk for m in members]).update(
        state=MemberState.RELEASING, state_changed_at=now
    )
    for member in members:
        if member.node.state == NodeState.DOWN:
            release_member(member, message="node declared down by an operator", now=now)
    node_ids = [m.node_id for m in members]
    record_event(
        actor=actor,
        verb="domain.release_requested",
        obj=locked,
        message=message,
        details={"generation": locked.generation},
    )
    announce_domain(locked)
    announce_nodes(node_ids)
    announce_desired_state(node_ids)
    finish_release(locked)  # nothing to wait for when every member is already down


def domain_extend_lease(*, actor: Actor, domain: ComputeDomain, by: timedelta) -> ComputeDomain:
    """Push the lease end out by `by`, within the namespace's maximum lifetime.

    The lease starts when the domain becomes Ready; before that there is nothing to extend.
    """
    if not isinstance(by, timedelta) or by <= timedelta(0):
        raise InvalidInput("must be a positive duration", field="by")
    with transaction.atomic():
        locked = _locked(domain)
        if locked.phase not in (Phase.READY, Phase.DEGRADED) or locked.lease_expires_at is None:
            raise InvalidTransition(f"{locked} is {locked.phase}; only a running lease extends")
        new_end = locked.lease_expires_at + by
        quota = admission.quota_of(locked.namespace)
        started = locked.ready_at or locked.created_at
        if quota.max_lifetime is not None and new_end - started > quota.max_lifetime:
            raise QuotaExceeded(
                f"would run longer than the maximum lifetime of namespace {locked.namespace.name}",
                field="by",
            )
        old_end = locked.lease_expires_at
        locked.lease_expires_at = new_end
        locked.save(update_fields=["lease_expires_at", "updated_at"])
        record_event(
            actor=actor,
            verb="domain.lease_extended",
            obj=locked,
            message=f"lease now ends {new_end:%Y-%m-%d %H:%M} UTC",
            details={"from": old_end.isoformat(), "to": new_end.isoformat()},
        )
        announce_domain(locked)
        return locked


def _locked(domain: ComputeDomain) -> ComputeDomain:
    locked = lock_domain(domain.pk)
    if locked is None:
        raise InvalidTransition(f"{domain} no longer exists")
    return locked


# --- agent reports ----------------------------------------------------------------------------

_STEP_STATE = {
    Step.CONFIGURING: MemberState.CONFIGURING,
    Step.STARTING_DAEMON: MemberState.CONFIGURING,
    Step.WAITING_PEERS: MemberState.WAITING_PEERS,
    Step.READY: MemberState.READY,
    Step.FAILED: MemberState.FAILED,
    Step.RELEASING: MemberState.CONFIGURING,  # tearing down something else first
    Step.IDLE: MemberState.ASSIGNED,  # has not picked the domain up yet
}
_STATE_STAMP = {
    MemberState.CONFIGURING: "configuring_at",
    MemberState.WAITING_PEERS: "waiting_peers_at",
    MemberState.READY: "ready_at",
}


# What deciding "this report changes nothing" reads: the steady state of every running tray
# costs one narrow query (the changing path re-reads the rows under a lock).
_UNCHANGED_CHECK_FIELDS = (
    "state", "step", "message", "daemon_state", "connections", "generation_applied",
    "domain__uid", "domain__phase", "domain__generation",
)  # fmt: skip


def domain_member_report(*, node_id: int, report: AgentReport) -> None:
    """Fold one agent report into its member's state and the domain's phase.

    Reports are level-triggered observations, so an old or repeated one is harmless: a
    report about another domain than the one holding the tray is ignored, and `ready`
    counts only for the generation the domain is at now. A report that changes nothing
    (the steady state of a running domain, every few seconds from every tray) costs one
    query and takes no lock.
    """
    current = (
        DomainMember.objects.select_related("domain")
        .filter(node_id=node_id, active=True)
        .order_by()
        .only(*_UNCHANGED_CHECK_FIELDS)
        .first()
    )
    if current is None or _outcome_unchanged(current.domain, current, report):
        return
    with transaction.atomic():
        domain = lock_domain(current.domain_id)
        member = (
            DomainMember.objects.select_related("node")
            .defer(NODE_REPORT)
            .filter(pk=current.pk, active=True)
            .order_by()
            .first()
        )
        if domain is None or member is None:
            return
        if _fold(domain, member, report):
            aggregate(domain)


def _outcome(
    domain: ComputeDomain, member: DomainMember, report: AgentReport
) -> tuple[str, dict[str, Any]] | None:
    """(member state, fields) the report calls for; None when it is not about this domain
    or the domain is past listening. State RELEASED means: the tray is clean, let it go."""
    if report.domain_uid not in (None, str(domain.uid)):
        return None  # still about a domain the tray served before
    fields: dict[str, Any] = {
        "step": report.step[:64],
        "message": (report.error or report.message)[:2000],
        "daemon_state": report.daemon_state[:32],
        "connections": {str(p.index): p.status for p in report.peers},
        "generation_applied": report.generation_applied,
    }
    if domain.phase == Phase.RELEASING:
        return (MemberState.RELEASED if report.clean else MemberState.RELEASING), fields
    if domain.phase in (Phase.FORMING, Phase.READY, Phase.DEGRADED):
        state = _STEP_STATE.get(report.step, MemberState.CONFIGURING)
        if state == MemberState.READY and report.generation_applied < domain.generation:
            state = MemberState.CONFIGURING  # ready, but for a desired state since replaced
        return state, fields
    return None


def _outcome_unchanged(domain: ComputeDomain, member: DomainMember, report: AgentReport) -> bool:
    outcome = _outcome(domain, member, report)
    if outcome is None:
        return True
    state, fields = outcome
    return state == member.state and all(getattr(member, k) == v for k, v in fields.items())


def _fold(domain: ComputeDomain, member: DomainMember, report: AgentReport) -> bool:
    """Update the member row from the report; True when its state changed."""
    outcome = _outcome(domain, member, report)
    if outcome is None:
        return False
    state, fields = outcome
    now = timezone.now()
    message = fields["message"]
    if state == MemberState.RELEASED:
        release_member(member, message=message or "agent confirmed a clean node", now=now)
        _member_event(domain, member, "member.released", message)
        return True
    changed = state != member.state
    if changed:
        fields.update(state=state, state_changed_at=now)
        if state in _STATE_STAMP:
            fields[_STATE_STAMP[state]] = now
    elif all(getattr(member, k) == v for k, v in fields.items()):
        return False
    DomainMember.objects.filter(pk=member.pk).update(**fields)
    if changed:
        member.state = state
        member.message = message
        _member_event(domain, member, f"member.{state}", message)
    return changed


def _member_event(domain: ComputeDomain, member: DomainMember, verb: str, message: str) -> None:
    record_event(
        actor=Actor.for_agent(member.node),
        verb=verb,
        obj=domain,
        node=member.node,
        message=f"{member.node.hostname} #{member.index}" + (f": {message}" if message else ""),
        details={"index": member.index, "state": member.state},
    )
    announce_nodes([member.node_id])
    announce_domain(domain)
