"""Maintenance windows: operators schedule planned work on trays, a clique or a rack.

Scheduling resolves the trays (they are what placement and lease extensions check, see
`domains.computedomains.placing` and `services.domain_extend_lease`) and names the live
domains already there whose lease reaches into the window: each gets an event in its own
timeline (`domain.maintenance_scheduled`), which tells its tenants (notifications follow
the audit trail). Cancelling tells them too. A window in the past cannot be scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from domains.audit.events import Actor, record_event
from domains.computedomains.models import ComputeDomain
from domains.errors import InvalidInput, InvalidTransition, NotFound
from domains.foresight.blast import DomainHit, domains_on, hits_from, member_rows
from domains.inventory.models import (
    Clique,
    MaintenanceScope,
    MaintenanceWindow,
    Node,
    Rack,
)
from domains.signals import announce_capacity_freed, announce_desired_state, announce_nodes
from domains.tenancy.selectors import Viewer, visible_namespace_ids

REASON_MAX = 300


@dataclass(frozen=True)
class WindowView:
    """A window with the live domains already on its trays, as one viewer may see them."""

    window: MaintenanceWindow
    trays: list[str]
    domains: list[DomainHit]  # whose lease reaches into the window (visible ones)
    hidden_domains: int  # of namespaces the viewer may not see

    @property
    def tenants(self) -> list[str]:
        return sorted({d.namespace for d in self.domains})


# --- reads --------------------------------------------------------------------------------


def windows_visible_to(user: Viewer, *, include_past: bool = False) -> QuerySet[MaintenanceWindow]:
    """Windows not cancelled (and not over, unless `include_past`), soonest first. Like the
    fabric, every signed-in user may read them; who is affected is redacted per viewer."""
    if not user.is_authenticated:
        return MaintenanceWindow.objects.none()
    qs = MaintenanceWindow.objects.filter(cancelled_at__isnull=True).select_related("created_by")
    if not include_past:
        qs = qs.filter(ends_at__gt=timezone.now())
    return qs.prefetch_related("nodes").order_by("starts_at", "id")


def window_for(user: Viewer, pk: int) -> MaintenanceWindow:
    window = (
        MaintenanceWindow.objects.filter(pk=pk).prefetch_related("nodes").first()
        if user.is_authenticated
        else None
    )
    if window is None:
        raise NotFound(f"no maintenance window {pk}")
    return window


def affected_domains(window: MaintenanceWindow) -> list[DomainHit]:
    """Live domains on the window's trays whose lease reaches its start (or that have no
    lease end yet: still forming, or without a lifetime)."""
    node_ids = [n.pk for n in window.nodes.all()]
    return [
        d
        for d in domains_on(node_ids)
        if d.lease_expires_at is None or d.lease_expires_at > window.starts_at
    ]


def window_views(user: Viewer, windows: Iterable[MaintenanceWindow]) -> list[WindowView]:
    """Windows (their `nodes` prefetched) as `user` may see them, other tenants' domains
    only counted: one query for all of them, however many."""
    windows = list(windows)
    visible = visible_namespace_ids(user)
    rows = member_rows({n.pk for w in windows for n in w.nodes.all()})
    views = []
    for window in windows:
        ids = {n.pk for n in window.nodes.all()}
        hits = [
            d
            for d in hits_from(r for r in rows if r[0] in ids)
            if d.lease_expires_at is None or d.lease_expires_at > window.starts_at
        ]
        shown = [d for d in hits if visible is None or d.namespace_id in visible]
        trays = sorted(n.hostname for n in window.nodes.all())
        views.append(WindowView(window, trays, shown, len(hits) - len(shown)))
    return views


def windows_for_domain(domain: ComputeDomain) -> QuerySet[MaintenanceWindow]:
    """Windows not over on the trays the domain holds now, soonest first."""
    return (
        MaintenanceWindow.objects.filter(
            nodes__memberships__domain=domain,
            nodes__memberships__active=True,
            cancelled_at__isnull=True,
            ends_at__gt=timezone.now(),
        )
        .distinct()
        .order_by("starts_at")
    )


# --- writes -------------------------------------------------------------------------------


def maintenance_schedule(
    *,
    actor: Actor,
    starts_at: datetime,
    ends_at: datetime,
    reason: str,
    trays: Sequence[str] = (),
    clique: str = "",
    rack: str = "",
) -> MaintenanceWindow:
    """Schedule a window on some trays, one clique or one rack (exactly one of them).

    Errors name the field; nothing is created on any error. The live domains already there
    are told (an event each, in the transaction); queued domains may be placed elsewhere.
    """
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("say why (operators and tenants read it)", field="reason")
    if len(reason) > REASON_MAX:
        raise InvalidInput(f"at most {REASON_MAX} characters", field="reason")
    if ends_at <= starts_at:
        raise InvalidInput("must be after the start", field="ends_at")
    if ends_at <= timezone.now():
        raise InvalidInput("must be in the future", field="ends_at")
    scope, target, nodes = _resolve(trays, clique, rack)
    with transaction.atomic():
        window = MaintenanceWindow.objects.create(
            scope=scope,
            target=target[:500],
            reason=reason,
            starts_at=starts_at,
            ends_at=ends_at,
            created_by=actor.saved_user,
        )
        window.nodes.set(nodes)
        hits = affected_domains(window)
        record_event(
            actor=actor,
            verb="maintenance.scheduled",
            obj=window,
            message=f"{window}: {reason}"[:500],
            details=_details(window, nodes, hits),
        )
        _tell_domains(actor, window, hits, "domain.maintenance_scheduled")
        announce_nodes(n.pk for n in nodes)
        # Their slices say whether a claim may make them new members; a window changes that.
        announce_desired_state(n.pk for n in nodes)
    return window


def maintenance_cancel(*, actor: Actor, window: MaintenanceWindow) -> MaintenanceWindow:
    """Call a window off; its trays are placeable again and its domains are told."""
    with transaction.atomic():
        locked = MaintenanceWindow.objects.select_for_update().get(pk=window.pk)
        if locked.cancelled_at is not None:
            raise InvalidTransition(f"{locked} is already cancelled")
        if locked.ends_at <= timezone.now():
            raise InvalidTransition(f"{locked} is already over")
        hits = affected_domains(locked)
        locked.cancelled_at = timezone.now()
        locked.save(update_fields=["cancelled_at"])
        nodes = list(locked.nodes.all())
        record_event(
            actor=actor,
            verb="maintenance.cancelled",
            obj=locked,
            message=str(locked)[:500],
            details=_details(locked, nodes, hits),
        )
        _tell_domains(actor, locked, hits, "domain.maintenance_cancelled")
        announce_nodes(n.pk for n in nodes)
        announce_desired_state(n.pk for n in nodes)
        announce_capacity_freed()
    return locked


def _resolve(trays: Sequence[str], clique: str, rack: str) -> tuple[str, str, list[Node]]:
    given = [
        name for name, value in (("trays", trays), ("clique", clique), ("rack", rack)) if value
    ]
    if len(given) != 1:
        raise InvalidInput("name exactly one of trays, clique or rack", field="trays")
    if trays:
        names = sorted({t.strip() for t in trays if t.strip()})
        nodes = list(Node.objects.filter(hostname__in=names).order_by("rack_id", "slot"))
        missing = sorted(set(names) - {n.hostname for n in nodes})
        if missing:
            raise InvalidInput(f"no tray named {', '.join(missing[:5])}", field="trays")
        return MaintenanceScope.TRAYS, ", ".join(names), nodes
    if clique:
        found = _clique(clique)
        if found is None:
            raise InvalidInput(f"no clique named {clique!r}", field="clique")
        return MaintenanceScope.CLIQUE, found.label, list(found.nodes.order_by("slot"))
    found_rack = Rack.objects.filter(name=rack).first()
    if found_rack is None:
        raise InvalidInput(f"no rack named {rack!r}", field="rack")
    return MaintenanceScope.RACK, found_rack.name, list(found_rack.nodes.order_by("slot"))


def _clique(name: str) -> Clique | None:
    uuid, _, number = name.rpartition(".")
    if uuid and (number.isascii() and number.isdigit()):
        found = Clique.objects.filter(cluster_uuid=uuid, clique_id=int(number)).first()
        if found is not None:
            return found
    return Clique.objects.filter(name=name).first()


def _details(
    window: MaintenanceWindow, nodes: list[Node], hits: list[DomainHit]
) -> dict[str, object]:
    return {
        "window": window.pk,
        "starts_at": window.starts_at.isoformat(),
        "ends_at": window.ends_at.isoformat(),
        "reason": window.reason,
        "trays": [n.hostname for n in nodes][:72],
        "domains": [f"{d.namespace}/{d.name}" for d in hits],
    }


def _tell_domains(
    actor: Actor, window: MaintenanceWindow, hits: list[DomainHit], verb: str
) -> None:
    """One event in each affected domain's timeline (and so to its tenants)."""
    by_uid = {
        str(d.uid): d
        for d in ComputeDomain.objects.select_related("namespace").filter(
            uid__in=[h.uid for h in hits]
        )
    }
    for hit in hits:
        domain = by_uid.get(hit.uid)
        if domain is None:
            continue
        when = f"{window.starts_at:%Y-%m-%d %H:%M} to {window.ends_at:%Y-%m-%d %H:%M} UTC"
        trays = ", ".join(hit.trays)
        if verb.endswith("cancelled"):
            message = f"maintenance of {trays} ({when}) is called off"
        else:
            message = f"maintenance of {trays} from {when}: {window.reason}"
        record_event(
            actor=actor,
            verb=verb,
            obj=domain,
            message=message[:500],
            details={
                "window": window.pk,
                "starts_at": window.starts_at.isoformat(),
                "ends_at": window.ends_at.isoformat(),
                "reason": window.reason,
                "trays": list(hit.trays),
            },
        )
