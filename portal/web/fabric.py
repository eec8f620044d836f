"""The fabric as the rack drawings need it: racks, trays, GPUs, domains and clique summaries.

One read for the whole fabric in a constant number of queries (racks, trays, GPUs, active
memberships, plus `topology_snapshot()`'s three), however many racks there are, so the
overview stays fast at 100 racks. What a viewer may know is decided here, once: operators
see every domain by name; tenants see their own namespaces' domains by name and everyone
else's trays only as an anonymous "in use".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.urls import reverse

from domains.computedomains.admission import smallest_request
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.models import DomainMember
from domains.inventory.models import Gpu, Node, Rack
from domains.placement.algorithm import clique_summaries
from domains.placement.model import CliqueSummary, TrayStatus
from domains.tenancy.selectors import is_operator, namespaces_visible_to

# Domain colours: light tints that keep dark text readable (contrast > 7:1), distinguishable
# for the common colour-vision deficiencies; the domain's name is always written beside it.
DOMAIN_PALETTE = (
    "#9ecae1",
    "#fdd0a2",
    "#c7e9c0",
    "#dadaeb",
    "#fcbba1",
    "#fde68a",
    "#a5f3fc",
    "#f5d0fe",
)

STATUS_WORDS = {
    TrayStatus.FREE: "free",
    TrayStatus.IN_USE: "in use",
    TrayStatus.CORDONED: "cordoned",
    TrayStatus.DRAINING: "draining",
    TrayStatus.DOWN: "down",
    TrayStatus.UNKNOWN: "not ready",
    TrayStatus.STALE: "no heartbeat",
    TrayStatus.NO_ADDRESS: "no management IP",
}


@dataclass(frozen=True)
class DomainTag:
    """A domain as one viewer may see it on a tray (anonymous when not theirs)."""

    label: str
    colour: str
    url: str = ""
    uid: str = ""
    phase: str = ""


ANONYMOUS = DomainTag(label="in use", colour="#d4d4d8")


@dataclass(frozen=True)
class GpuCell:
    index: int
    health: str
    fabric_state: str


@dataclass
class TrayView:
    node_id: int
    hostname: str
    slot: int
    state: str  # NodeState
    status: str  # placement's TrayStatus: why it is (not) free
    clique_id: int | None
    clique_name: str
    last_heartbeat: datetime | None
    daemon_state: str
    gpus: list[GpuCell] = field(default_factory=list)
    domain: DomainTag | None = None
    url: str = ""
    highlight: bool = False

    @property
    def status_word(self) -> str:
        return STATUS_WORDS.get(self.status, self.status)

    @property
    def unhealthy_gpus(self) -> int:
        return sum(1 for g in self.gpus if g.health != "healthy")


@dataclass
class RackView:
    name: str
    location: str
    compute_slots: int
    switch_slots: int
    trays: dict[int, TrayView] = field(default_factory=dict)  # slot → tray
    cliques: list[CliqueSummary] = field(default_factory=list)
    url: str = ""

    @property
    def free(self) -> int:
        return sum(c.free for c in self.cliques)


def fabric_view(
    *,
    viewer: Any,
    rack_names: Iterable[str] | None = None,
    highlight: Iterable[int] = (),
    links: bool = True,
) -> list[RackView]:
    """Every rack (or the named ones) with trays, GPUs, domains and clique summaries."""
    operator = is_operator(viewer)
    racks_qs = Rack.objects.all()
    if rack_names is not None:
        racks_qs = racks_qs.filter(name__in=list(rack_names))
    racks = {
        r.pk: RackView(
            name=r.name,
            location=r.location,
            compute_slots=r.compute_slots,
            switch_slots=r.switch_slots,
            url=reverse("operator:rack", args=[r.name]) if operator and links else "",
        )
        for r in racks_qs
    }
    if not racks:
        return []
    topology = topology_snapshot()
    status = {t.node_id: t.status for c in topology.cliques for t in c.trays}
    tags = _domain_tags(viewer, operator, rack_ids=racks.keys(), links=links)
    gpus = _gpus(rack_ids=racks.keys())
    wanted = set(highlight)
    for node in (
        Node.objects.filter(rack_id__in=racks.keys(), slot__isnull=False)
        .select_related("clique")
        .order_by("rack_id", "slot")
    ):
        rack = racks[node.rack_id]
        clique_name = (node.clique.name or node.clique.label) if node.clique else ""
        rack.trays[node.slot] = TrayView(
            node_id=node.pk,
            hostname=node.hostname,
            slot=node.slot,
            state=node.state,
            status=status.get(node.pk, node.state if node.state != "ready" else "unknown"),
            clique_id=node.clique_id,
            clique_name=clique_name,
            last_heartbeat=node.last_heartbeat,
            # A tenant learns nothing of other tenants' trays beyond "in use".
            daemon_state=node.daemon_state if operator else "",
            gpus=gpus.get(node.pk, []),
            domain=tags.get(node.pk),
            url=reverse("operator:node", args=[node.hostname]) if operator and links else "",
            highlight=node.pk in wanted,
        )
    by_rack_name = {r.name: r for r in racks.values()}
    for summary in clique_summaries(topology, smallest_request=smallest_request()):
        if summary.rack in by_rack_name:
            by_rack_name[summary.rack].cliques.append(summary)
    return list(racks.values())


def _gpus(*, rack_ids: Iterable[int]) -> dict[int, list[GpuCell]]:
    cells: dict[int, list[GpuCell]] = defaultdict(list)
    rows = (
        Gpu.objects.filter(node__rack_id__in=list(rack_ids))
        .order_by("node_id", "index")
        .values_list("node_id", "index", "health", "fabric_state")
    )
    for node_id, index, health, fabric_state in rows:
        cells[node_id].append(GpuCell(index, health, fabric_state))
    return cells


def _domain_tags(
    viewer: Any, operator: bool, *, rack_ids: Iterable[int], links: bool
) -> dict[int, DomainTag]:
    """node id → how this viewer sees the domain holding it."""
    own: set[int] | None = None
    if not operator:
        own = set(namespaces_visible_to(viewer).values_list("pk", flat=True))
    rows = (
        DomainMember.objects.filter(active=True, node__rack_id__in=list(rack_ids))
        .order_by("domain_id")
        .values_list(
            "node_id", "domain_id", "domain__uid", "domain__name", "domain__phase",
            "domain__namespace_id", "domain__namespace__name",
        )
    )  # fmt: skip
    tags: dict[int, DomainTag] = {}
    for node_id, domain_id, uid, name, phase, ns_id, ns_name in rows:
        if own is not None and ns_id not in own:
            tags[node_id] = ANONYMOUS
            continue
        url = reverse("tenant:domain", args=[ns_name, uid]) if links else ""
        tags[node_id] = DomainTag(
            label=f"{ns_name}/{name}" if operator else name,
            colour=DOMAIN_PALETTE[domain_id % len(DOMAIN_PALETTE)],
            url=url,
            uid=str(uid),
            phase=phase,
        )
    return tags


def unracked_trays(limit: int = 200) -> list[Node]:
    """Trays that joined without a rack and slot (e.g. agents on unlabelled hosts): they
    cannot be drawn in an elevation, but operators must still find them."""
    return list(
        Node.objects.filter(Q(rack__isnull=True) | Q(slot__isnull=True))
        .select_related("clique")
        .order_by("hostname")[:limit]
    )
