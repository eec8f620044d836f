"""The fabric as its readers need it: which trays are free, in placement's terms.

Whether a tray is free depends on the memberships holding it, so this read lives with the
lifecycle; `domains.placement` stays pure (no ORM) and takes the snapshot as a value.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q
from django.utils import timezone

from domains.computedomains.models import DomainMember
from domains.inventory.models import Clique, Node, NodeState
from domains.placement.model import CliqueView, Topology, Tray, TrayStatus

_STATE_STATUS: dict[str, str] = {
    NodeState.CORDONED: TrayStatus.CORDONED,
    NodeState.DRAINING: TrayStatus.DRAINING,
    NodeState.DOWN: TrayStatus.DOWN,
    NodeState.UNKNOWN: TrayStatus.UNKNOWN,
}


def topology_snapshot(*, now: datetime | None = None) -> Topology:
    """Every clique with its trays and why each is (not) free, in two queries.

    A tray is free when it is `ready`, not gone, heard from within HEARTBEAT_STALE_AFTER
    and not held by an active DomainMember (held until its agent confirmed a clean node).
    Trays without a clique (no multi-node NVLink) cannot join a domain and are left out.
    Freshness and membership are computed by PostgreSQL as booleans: parsing thousands of
    timestamps in Python would cost more than the placement itself.
    """
    now = now or timezone.now()
    stale_before = now - settings.PORTAL["HEARTBEAT_STALE_AFTER"]
    rows = (
        Node.objects.filter(clique__isnull=False)
        .annotate(
            busy=Exists(DomainMember.objects.filter(node=OuterRef("pk"), active=True)),
            fresh=ExpressionWrapper(
                Q(last_heartbeat__gte=stale_before), output_field=BooleanField()
            ),
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
            "fresh",
            "clique_id",
        )
    )
    trays: dict[int, list[Tray]] = {}
    for node_id, hostname, slot, ip, gpus, state, gone, busy, fresh, clique_id in rows:
        status = _status(busy, state, gone, bool(fresh), bool(ip))
        trays.setdefault(clique_id, []).append(
            Tray(node_id, hostname, slot or 0, ip or "", gpus, status)
        )
    cliques = Clique.objects.order_by(
        "rack__position", "rack__name", "cluster_uuid", "clique_id"
    ).values_list("id", "cluster_uuid", "clique_id", "name", "rack__name")
    return Topology(
        tuple(
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
    )


def _status(busy: bool, state: str, gone: bool, fresh: bool, has_ip: bool) -> str:
    if busy:
        return TrayStatus.IN_USE
    if not has_ip:  # every member's nodes file lists each peer's IP: it could not serve
        return TrayStatus.NO_ADDRESS
    if gone:
        return TrayStatus.UNKNOWN
    if state != NodeState.READY:
        return _STATE_STATUS.get(state, TrayStatus.UNKNOWN)
    if not fresh:  # no heartbeat at all, or none within HEARTBEAT_STALE_AFTER
        return TrayStatus.STALE
    return TrayStatus.FREE
