"""The user-visible services of the domain lifecycle: request, dry run, approve, deny,
release, extend the lease.

Each is keyword-only, runs in one transaction, records an Event and announces the change
after commit. Pages, API actions and Kubernetes sync call these; none of them writes
through the ORM itself. Placement (`placing`), the phase machine (`phases`), the members'
reports (`members`) and the periodic controller (`reconcile`) sit beside them.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from domains.audit.events import CONTROLLER, Actor, new_event, record_event, record_events
from domains.computedomains import admission
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.following import cliques_to_keep
from domains.computedomains.forecast import spec_forecast
from domains.computedomains.models import (
    ApprovalState,
    ComputeDomain,
    DomainMember,
    DomainSource,
    MemberState,
    Phase,
    PlacementConstraint,
)
from domains.computedomains.phases import (
    WAITING_FOR_WORKLOAD,
    WAITING_MESSAGE,
    finish_release,
    lock_domain,
    release_member,
    tally_admitted,
    transition,
)
from domains.computedomains.specs import DomainSpec, DryRunResult
from domains.context import get_request_id
from domains.errors import (
    InvalidInput,
    InvalidTransition,
    MaintenanceConflict,
    NameTaken,
    QuotaExceeded,
)
from domains.inventory.models import MaintenanceWindow, NodeState
from domains.inventory.versions import driver_mix
from domains.placement.model import Rejection, SpanningPlacement
from domains.placement.spanning import plan
from domains.signals import (
    announce_desired_state,
    announce_domain,
    announce_nodes,
    announce_placement_wanted,
)
from domains.tenancy.models import Namespace

# Phases whose members hold trays: releasing them needs the agents' confirmation.
HOLDING_PHASES = (Phase.FORMING, Phase.READY, Phase.DEGRADED)
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
        checked = admission.check(namespace=namespace, spec=spec, requested_by=actor.user)
        checked.enforce()
        domain = _create(actor, namespace, checked.clean, source, checked.needs_approval)
        if domain.phase == Phase.ADMITTED and domain.num_nodes:
            announce_placement_wanted(domain.pk)
        return domain


def _admitted_reason(clean: admission.CleanSpec, approval: bool) -> str:
    if approval:
        return "AwaitingApproval"
    return "Queued" if clean.num_nodes else WAITING_FOR_WORKLOAD


def _admitted_message(clean: admission.CleanSpec, approval: bool) -> str:
    if approval:
        return f"{clean.num_nodes} trays is above the approval threshold; waiting for an admin"
    return "admitted; waiting for placement" if clean.num_nodes else WAITING_MESSAGE


def _cliques_to_keep(clean: admission.CleanSpec, now: datetime) -> list[int]:
    """A domain that follows its workload keeps to the cliques its constraint allows now
    (following.py)."""
    if clean.num_nodes:
        return []
    return cliques_to_keep(
        gpus_per_node=clean.gpus_per_node,
        constraint=clean.placement_constraint,
        target=clean.placement_target,
        now=now,
    )


def _create(
    actor: Actor, namespace: Namespace, clean: admission.CleanSpec, source: str, approval: bool
) -> ComputeDomain:
    now = timezone.now()
    uid = uuid.uuid4()
    try:
        with transaction.atomic():
            domain = ComputeDomain.objects.create(
                uid=uid,
                imex_name_token=uid.hex[:10],
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
                replace_policy=clean.replace_policy,
                span_cliques=clean.span_cliques,
                span_racks=clean.span_racks,
                phase=Phase.PENDING if approval else Phase.ADMITTED,
                approval_state=ApprovalState.PENDING if approval else ApprovalState.NOT_REQUIRED,
                reason=_admitted_reason(clean, approval),
                message=_admitted_message(clean, approval),
                requested_by=actor.saved_user,
                source=source,
                request_id=get_request_id(),
                admitted_at=None if approval else now,
            )
            domain.cliques.set(_cliques_to_keep(clean, now))
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
    verb = "domain.awaiting_approval" if approval else "domain.admitted"
    record_events(  # one INSERT, in this order
        [
            new_event(actor=actor, verb="domain.requested", obj=domain, details=details),
            new_event(actor=CONTROLLER, verb=verb, obj=domain),
        ]
    )
    if not approval:
        tally_admitted(domain)
    announce_domain(domain)
    return domain


def domain_dry_run(
    *, namespace: Namespace, spec: DomainSpec, requested_by: User | None = None
) -> DryRunResult:
    """Validate and say where it would land (or why not) without creating anything.

    Invalid input raises InvalidInput like `domain_request`; quota and capacity problems
    are answered in the result, so the form can show them before submitting. Whether it
    needs an admin's approval is said for `requested_by` (a portal admin's own never does).
    """
    checked = admission.check(namespace=namespace, spec=spec, requested_by=requested_by)
    clean, problems, approval = checked.clean, checked.quota_problems, checked.needs_approval
    now = timezone.now()
    verdict = DryRunResult(
        placeable=False,
        quota_ok=not problems,
        needs_approval=approval,
        message="",
        quota_problems=problems,
        quota_impact=checked.quota_impact,
        maintenance=_maintenance_in_the_way(clean, now),
    )
    if clean.num_nodes == 0:
        message = "follows the workload: nothing is reserved; trays join as its pods arrive"
        if problems:
            message = f"over quota: {problems[0]}"
        return replace(verdict, placeable=not problems, message=message)
    result = plan(clean.placement_request(at=now), topology_snapshot(now=now))
    if isinstance(result, Rejection) or approval:
        verdict = _with_estimate(verdict, clean, approval, now)
    if isinstance(result, Rejection):
        return replace(verdict, message=result.message, reasons=list(result.reasons))
    message = f"would be placed on {result.describe()}"
    if problems:
        message = f"fits the fabric, but is over quota: {problems[0]}"
    elif approval:
        message += "; needs an admin's approval first"
    verdict = replace(
        verdict,
        placeable=True,
        message=message,
        nodes=result.hostnames,
        node_ids=result.node_ids,
        mixed_drivers=driver_mix(result.node_ids),
    )
    if isinstance(result, SpanningPlacement):  # one IMEX ensemble per clique: say which
        return replace(
            verdict, reasons=list(result.reasons), racks=result.racks, cliques=len(result.parts)
        )
    return replace(
        verdict,
        clique=result.clique_label,
        clique_name=result.clique_name,
        rack=result.rack,
        racks=[result.rack] if result.rack else [],
        cliques=1,
    )


def _with_estimate(
    verdict: DryRunResult, clean: admission.CleanSpec, approval: bool, now: datetime
) -> DryRunResult:
    """When it would be placed if requested now: behind the queue, simulated forward."""
    estimate = spec_forecast(clean, needs_approval=approval, now=now)
    at = datetime.fromtimestamp(estimate.at, UTC) if estimate.at is not None else None
    return replace(
        verdict,
        estimated_placement_at=at,
        estimate_reason=estimate.reason,
        estimate_message=estimate.message,
    )


def _maintenance_in_the_way(clean: admission.CleanSpec, now: datetime) -> list[str]:
    """Windows on the trays a request may use that its lease would reach into, in words."""
    until = now + clean.lifetime + settings.PORTAL["FORMATION_DEADLINE"]
    windows = MaintenanceWindow.objects.filter(
        cancelled_at__isnull=True, ends_at__gt=now, starts_at__lt=until
    )
    if clean.placement_constraint == PlacementConstraint.RACK:
        windows = windows.filter(nodes__rack__name=clean.placement_target)
    elif clean.placement_constraint == PlacementConstraint.CLIQUE:
        windows = windows.filter(nodes__clique__in=admission.cliques_named(clean.placement_target))
    return [
        f"maintenance of {w.get_scope_display().lower()} {w.target} from "
        f"{w.starts_at:%Y-%m-%d %H:%M} to {w.ends_at:%Y-%m-%d %H:%M} UTC ({w.reason}) starts "
        "before the lease would end: its trays are left out"
        for w in windows.distinct().order_by("starts_at")[:5]
    ]


def domain_approve(*, actor: Actor, domain: ComputeDomain) -> ComputeDomain:
    """An admin lets a request above the threshold go on to placement."""
    with transaction.atomic():
        locked = _locked(domain)
        if locked.approval_state != ApprovalState.PENDING or not transition(
            locked,
            Phase.PENDING,
            Phase.ADMITTED,
            verb="domain.approved",
            actor=actor,
            approval_state=ApprovalState.APPROVED,
            approved_by=actor.saved_user,
            admitted_at=timezone.now(),
            reason="Queued",
            message=f"approved by {actor.name}; waiting for placement",
        ):
            raise InvalidTransition(f"{locked} is {locked.phase}, not waiting for approval")
        announce_placement_wanted(locked.pk)
        return locked


def domain_deny(*, actor: Actor, domain: ComputeDomain, reason: str = "") -> ComputeDomain:
    """An admin turns a request down: it ends Failed (reason Denied), quota is freed."""
    with transaction.atomic():
        locked = _locked(domain)
        message = f"denied by {actor.name}" + (f": {reason}" if reason else "")
        if locked.approval_state != ApprovalState.PENDING or not transition(
            locked,
            Phase.PENDING,
            Phase.FAILED,
            verb="domain.denied",
            actor=actor,
            says=message,
            approval_state=ApprovalState.DENIED,
            failed_at=timezone.now(),
            reason="Denied",
            message=message,
        ):
            raise InvalidTransition(f"{locked} is {locked.phase}, not waiting for approval")
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
            transition(  # it held nothing to wait for
                locked,
                QUEUED_PHASES,
                Phase.RELEASED,
                verb="domain.released",
                actor=actor,
                says=message,
                release_requested_at=now,
                released_at=now,
                reason="Released",
                message=message,
            )
        elif locked.phase in HOLDING_PHASES:
            _begin_release(locked, actor, message, now)
        return locked


def _begin_release(locked: ComputeDomain, actor: Actor, message: str, now: datetime) -> None:
    if not transition(
        locked,
        HOLDING_PHASES,
        Phase.RELEASING,
        verb="domain.release_requested",
        actor=actor,
        says=message,
        details=lambda domain: {"generation": domain.generation},
        bump=True,
        release_requested_at=now,
        reason="Releasing",
        message=message + "; waiting for every agent to confirm a clean tray",
    ):
        return
    members = list(locked.members.select_related("node").filter(active=True))
    DomainMember.objects.filter(pk__in=[m.pk for m in members]).update(
        state=MemberState.RELEASING, state_changed_at=now
    )
    for member in members:
        if member.node.state == NodeState.DOWN:
            release_member(member, message="tray declared down by an operator", now=now)
    node_ids = [m.node_id for m in members]
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
        _refuse_maintenance(locked, new_end)
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


def _refuse_maintenance(domain: ComputeDomain, new_end: datetime) -> None:
    """A lease does not run into a maintenance window on the domain's trays."""
    window = (
        MaintenanceWindow.objects.filter(
            nodes__memberships__domain=domain,
            nodes__memberships__active=True,
            cancelled_at__isnull=True,
            ends_at__gt=timezone.now(),
            starts_at__lt=new_end,
        )
        .order_by("starts_at")
        .first()
    )
    if window is not None:
        raise MaintenanceConflict(
            f"would run into maintenance of {window.get_scope_display().lower()} "
            f"{window.target} from {window.starts_at:%Y-%m-%d %H:%M} UTC ({window.reason}); "
            f"the lease can end at {window.starts_at:%Y-%m-%d %H:%M} UTC at the latest",
            field="by",
            details={"window": window.pk, "startsAt": window.starts_at.isoformat()},
        )


def _locked(domain: ComputeDomain) -> ComputeDomain:
    locked = lock_domain(domain.pk)
    if locked is None:
        raise InvalidTransition(f"{domain} no longer exists")
    return locked
