"""The fabric as its readers need it: which trays are free (placement's snapshot), racks,
cliques and trays with their occupancy (lists), and everything a rack drawing shows.

Whether a tray is free depends on the memberships holding it, so these reads live with the
lifecycle; `domains.placement` stays pure (no ORM) and takes the snapshot as a value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import (
    BooleanField,
    CharField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
)
from django.db.models.functions import Cast
from django.utils import timezone

from domains.computedomains.admission import smallest_request
from domains.computedomains.models import DomainMember
from domains.computedomains.traytruth import tray_status
from domains.inventory.gpuhealth import ALERT_FIELDS, GpuAlert, gpu_alerts
from domains.inventory.models import (
    Clique,
    Gpu,
    MaintenanceWindow,
    Node,
    NodeCondition,
    NodeState,
    PowerShelf,
    Rack,
    SwitchTray,
)
from domains.placement.algorithm import clique_summaries
from domains.placement.model import CliqueSummary, CliqueView, Topology, Tray
from domains.tenancy.selectors import Viewer

# A tray in a clique whose rack is another than the tray's: NVLink never spans racks, so
# either the tray or its clique is not what the inventory says; placement leaves it out.
FOREIGN_CLIQUE = Q(rack__isnull=False, clique__rack__isnull=False) & ~Q(rack=F("clique__rack"))


def topology_snapshot(*, now: datetime | None = None) -> Topology:
    """Every clique with its trays, why each is (not) free and its maintenance windows not
    yet over, in three queries.

    Each tray's status is `traytruth.tray_status`: free when it is `ready`, not gone,
    heard from within HEARTBEAT_STALE_AFTER, without a blocking condition its agent reported
    (NVML not loadable, the host's own IMEX service, an unfinished fabric registration), in a
    clique of its own rack and not held by an active DomainMember (held until its agent
    confirmed a clean node).
    Trays without a clique (no multi-node NVLink) cannot join a domain and are left out.
    Freshness and membership are computed by PostgreSQL as booleans: parsing thousands of
    timestamps in Python would cost more than the placement itself.
    """
    now = now or timezone.now()
    trays: dict[int, list[Tray]] = {}
    windows = maintenance_by_tray(now)
    for row in _tray_rows(now - settings.PORTAL["HEARTBEAT_STALE_AFTER"]):
        node_id, hostname, slot, ip, gpus, state, gone, busy, blocked, fresh, clique, foreign = row
        status = tray_status(
            state=state,
            gone=gone,
            fresh=bool(fresh),
            held=busy,
            blocked=blocked,
            has_ip=bool(ip),
            foreign=bool(foreign),
        )
        trays.setdefault(clique, []).append(
            Tray(
                node_id, hostname, slot or 0, ip or "", gpus, status, windows.get(node_id, ()), busy
            )
        )
    return Topology(_clique_views(trays))


def _tray_rows(stale_before: datetime) -> QuerySet[Node, tuple[Any, ...]]:
    """Each tray with a clique, with what decides whether it is free, as one row."""
    return (
        Node.objects.filter(clique__isnull=False)
        .annotate(
            busy=Exists(DomainMember.objects.filter(node=OuterRef("pk"), active=True)),
            blocked=Exists(NodeCondition.objects.filter(node=OuterRef("pk"), blocking=True)),
            fresh=ExpressionWrapper(
                Q(last_heartbeat__gte=stale_before), output_field=BooleanField()
            ),
            foreign=ExpressionWrapper(FOREIGN_CLIQUE, output_field=BooleanField()),
        )
        .order_by("clique_id", "slot", "hostname")
        .values_list(
            "id",
            "hostname",
            "slot",
            "management_ip",
            "gpu_count",
            "state",
            "gone",
            "busy",
            "blocked",
            "fresh",
            "clique_id",
            "foreign",
        )
    )


def _clique_views(trays: dict[int, list[Tray]]) -> tuple[CliqueView, ...]:
    """The cliques that have trays, in the racks' order, each with its trays."""
    cliques = Clique.objects.order_by(
        "rack__position", "rack__name", "cluster_uuid", "clique_id"
    ).values_list("id", "cluster_uuid", "clique_id", "name", "rack__name")
    return tuple(
        CliqueView(
            clique_id=pk,
            label=f"{cluster_uuid}.{number}",
            name=name or f"{cluster_uuid}.{number}",
            rack=rack or "",
            trays=tuple(trays[pk]),
        )
        for pk, cluster_uuid, number, name, rack in cliques
        if pk in trays
    )


def maintenance_by_tray(now: datetime) -> dict[int, tuple[tuple[float, float], ...]]:
    """Each tray's maintenance windows not yet over and not cancelled, as (start, end) in
    seconds since the epoch (placement's clock), in one query."""
    rows = MaintenanceWindow.nodes.through.objects.filter(
        maintenancewindow__cancelled_at__isnull=True, maintenancewindow__ends_at__gt=now
    ).values_list("node_id", "maintenancewindow__starts_at", "maintenancewindow__ends_at")
    windows: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for node_id, start, end in rows:
        windows[node_id].append((start.timestamp(), end.timestamp()))
    return {node_id: tuple(sorted(spans)) for node_id, spans in windows.items()}


# --- the fabric for lists and drawings ---------------------------------------------------------

# A tray is in use while an active membership holds it.
_IN_USE = Q(nodes__memberships__active=True)


def racks_with_occupancy(user: Viewer) -> QuerySet[Rack]:
    """Every rack (the fabric is visible to every signed-in user) with its tray counts
    (`trays_total`, `trays_ready`, `trays_in_use`) and cliques."""
    if not user.is_authenticated:
        return Rack.objects.none()
    return (
        Rack.objects.annotate(
            trays_total=Count("nodes", distinct=True),
            trays_ready=Count("nodes", filter=Q(nodes__state=NodeState.READY), distinct=True),
            trays_in_use=Count("nodes", filter=_IN_USE, distinct=True),
        )
        .prefetch_related(Prefetch("cliques", queryset=Clique.objects.order_by("clique_id")))
        .order_by("position", "name")
    )


def cliques_with_occupancy(user: Viewer) -> QuerySet[Clique]:
    """Every clique with its rack and tray counts, as `racks_with_occupancy` counts them."""
    if not user.is_authenticated:
        return Clique.objects.none()
    return (
        Clique.objects.select_related("rack")
        .annotate(
            trays_total=Count("nodes", distinct=True),
            trays_ready=Count("nodes", filter=Q(nodes__state=NodeState.READY), distinct=True),
            trays_in_use=Count("nodes", filter=_IN_USE, distinct=True),
        )
        .order_by("rack__position", "rack__name", "clique_id", "pk")
    )


def nodes_with_holders(user: Viewer) -> QuerySet[Node]:
    """Every tray with its live membership and that domain prefetched (`live_memberships`)
    and whether a blocking condition keeps it out (`blocked`): what its one truth
    (`traytruth`) needs; what of the domain the caller may see is for the caller to decide."""
    if not user.is_authenticated:
        return Node.objects.none()
    live = DomainMember.objects.filter(active=True).select_related("domain__namespace")
    return (
        Node.objects.select_related("rack", "clique")
        .annotate(blocked=Exists(NodeCondition.objects.filter(node=OuterRef("pk"), blocking=True)))
        .prefetch_related(Prefetch("memberships", queryset=live, to_attr="live_memberships"))
    )


def switch_trays_visible_to(user: Viewer) -> QuerySet[SwitchTray]:
    """Every NVLink switch tray with its rack, by rack and slot (the fabric is visible to
    every signed-in user)."""
    if not user.is_authenticated:
        return SwitchTray.objects.none()
    return SwitchTray.objects.select_related("rack").order_by(
        "rack__position", "rack__name", "slot"
    )


def power_shelves_visible_to(user: Viewer) -> QuerySet[PowerShelf]:
    """Every power shelf with its rack, by rack and position."""
    if not user.is_authenticated:
        return PowerShelf.objects.none()
    return PowerShelf.objects.select_related("rack").order_by(
        "rack__position", "rack__name", "position"
    )


@dataclass(frozen=True, slots=True)
class GpuCell:
    """One GPU as a drawing shows it."""

    index: int
    health: str
    fabric_state: str
    alerts: tuple[GpuAlert, ...] = ()  # its health readings' alerts (XID, NVLink, hot)
    temperature_c: int | None = None


@dataclass(frozen=True)
class Holder:
    """The domain holding a tray, as much as a drawing of the tray shows."""

    domain_id: int
    uid: str
    name: str
    phase: str
    namespace_id: int
    namespace_name: str


@dataclass(frozen=True)
class FabricRead:
    """Racks with everything their drawings show, read in a constant number of queries."""

    racks: list[Rack]  # by position and name
    trays: list[Node]  # racked trays of those racks, with their clique, by rack and slot
    gpus: dict[int, list[GpuCell]]  # tray id → its GPUs by index
    holders: dict[int, Holder]  # tray id → the domain holding it
    topology: Topology  # the whole fabric, as placement sees it
    summaries: list[CliqueSummary]  # occupancy and fragmentation of every clique


def fabric_read(
    *,
    rack_names: Iterable[str] | None = None,
    topology: Topology | None = None,
    summaries: list[CliqueSummary] | None = None,
) -> FabricRead:
    """The named racks (all when None) with trays, GPUs, holders and clique summaries: five
    queries, plus the snapshot's two unless `topology` is handed in, however many racks.
    `summaries` of that topology, when the caller has them, spare computing them again."""
    racks_qs = Rack.objects.all()
    if rack_names is not None:
        racks_qs = racks_qs.filter(name__in=list(rack_names))
    racks = list(racks_qs)
    if not racks:
        return FabricRead([], [], {}, {}, topology or Topology(()), [])
    topology = topology or topology_snapshot()
    rack_ids = [r.pk for r in racks]
    return FabricRead(
        racks=racks,
        trays=list(
            Node.objects.filter(rack_id__in=rack_ids, slot__isnull=False)
            .select_related("clique")
            .order_by("rack_id", "slot")
        ),
        gpus=_gpus(rack_ids),
        holders=_holders(rack_ids),
        topology=topology,
        summaries=summaries
        if summaries is not None
        else clique_summaries(topology, smallest_request=smallest_request()),
    )


def _gpus(rack_ids: list[int]) -> dict[int, list[GpuCell]]:
    cells: dict[int, list[GpuCell]] = defaultdict(list)
    rows = (
        Gpu.objects.filter(node__rack_id__in=rack_ids)
        .order_by("node_id", "index")
        .values_list("node_id", "index", "health", "fabric_state", *ALERT_FIELDS)
    )
    now = timezone.now()
    for node_id, index, health, fabric_state, *alerting in rows:
        alerts = tuple(gpu_alerts(*alerting, now=now))
        temperature = alerting[ALERT_FIELDS.index("temperature_c")]
        cells[node_id].append(GpuCell(index, health, fabric_state, alerts, temperature))
    return cells


def _holders(rack_ids: list[int]) -> dict[int, Holder]:
    rows = (
        DomainMember.objects.filter(active=True, node__rack_id__in=rack_ids)
        .order_by("domain_id")
        .values_list(
            "node_id", "domain_id", "domain__uid", "domain__name", "domain__phase",
            "domain__namespace_id", "domain__namespace__name",
        )
    )  # fmt: skip
    return {
        node_id: Holder(domain_id, str(uid), name, phase, ns_id, ns_name)
        for node_id, domain_id, uid, name, phase, ns_id, ns_name in rows
    }


@dataclass(frozen=True, slots=True, eq=False)
class FleetHolder:
    """A live domain holding trays, as the Fleet page names it (one object per domain, so
    compared and hashed by identity: cheap for 18,000 trays)."""

    uid: str
    namespace: str
    name: str
    label: str  # namespace/name


def fleet_holders() -> dict[int, FleetHolder]:
    """Every tray held by a domain → that domain (one object per domain), in one query: a
    row per domain with its trays' ids (5,000 rows at 1,000 racks, not 18,000), the uid
    as text."""
    rows = (
        DomainMember.objects.filter(active=True)
        .order_by()
        .values("domain_id")
        .annotate(
            uid=Cast("domain__uid", output_field=CharField()),
            namespace=F("domain__namespace__name"),
            name=F("domain__name"),
            nodes=ArrayAgg("node_id"),
        )
        .values_list("uid", "namespace", "name", "nodes")
    )
    held = {}
    for uid, namespace, name, nodes in rows:
        holder = FleetHolder(uid, namespace, name, f"{namespace}/{name}")
        held.update(dict.fromkeys(nodes, holder))
    return held


def unracked_trays(limit: int = 200) -> list[Node]:
    """Trays that joined without a rack and slot (e.g. agents on unlabelled hosts): they
    cannot be drawn in an elevation, but operators must still find them."""
    return list(
        Node.objects.filter(Q(rack__isnull=True) | Q(slot__isnull=True))
        .select_related("clique")
        .order_by("hostname")[:limit]
    )


def placement_targets() -> list[str]:
    """Rack names and clique names (or labels): what a placement constraint may name."""
    names = list(Rack.objects.values_list("name", flat=True))
    names += [c.name or c.label for c in Clique.objects.all()]
    return names
