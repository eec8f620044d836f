"""The fabric as the rack drawings show it to one viewer: racks, trays, GPUs, domains and
clique summaries, with links. (Colours are the drawings' own: state as fill, domain as
outline.)

The rows come from one read (`domains.computedomains.fabric.fabric_read`, a constant number
of queries however many racks); this module only decides what the viewer may know, once:
operators see every domain by name; tenants see their own namespaces' domains by name and
everyone else's trays only as an anonymous "in use".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.urls import reverse

from domains.computedomains.fabric import FabricRead, GpuCell, Holder, fabric_read
from domains.computedomains.traytruth import STATUS_WORDS
from domains.inventory.gpuhealth import alert_words
from domains.inventory.models import Node, NodeState, Rack
from domains.inventory.parts import Part, WindowMark
from domains.placement.model import CliqueSummary
from domains.tenancy.selectors import Viewer, is_operator, namespaces_visible_to

TRAY_DOWN_DAEMON = "unknown: tray down"


def daemon_word(daemon_state: str, tray_state: str) -> str:
    """The IMEX daemon's state as a page may say it: on a tray that is down, the last word
    its agent reported (READY, say) is no longer known to be true."""
    if tray_state == NodeState.DOWN:
        return TRAY_DOWN_DAEMON
    return daemon_state or "—"


@dataclass(frozen=True)
class DomainTag:
    """A domain as one viewer may see it on a tray (anonymous when not theirs)."""

    label: str
    url: str = ""
    uid: str = ""
    phase: str = ""
    domain_id: int = 0  # tells two domains' outlines apart on every rack drawing


ANONYMOUS = DomainTag(label="in use")  # no uid: drawn with no outline


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
    # A preview marks where a request would land; a running domain's drawing marks its own
    # trays (and must not say "lands here" of them).
    preview: bool = True

    @property
    def status_word(self) -> str:
        return STATUS_WORDS.get(self.status, self.status)

    @property
    def unhealthy_gpus(self) -> int:
        return sum(1 for g in self.gpus if g.health != "healthy")

    @property
    def gpu_alerts(self) -> list[str]:
        """Each GPU with alerts, in words: "GPU2 XID 79, NVLink errors rising"."""
        return [f"GPU{g.index} {alert_words(list(g.alerts))}" for g in self.gpus if g.alerts]

    @property
    def alert_kinds(self) -> list[str]:
        return sorted({a.kind for g in self.gpus for a in g.alerts})


@dataclass
class RackView:
    name: str
    location: str
    compute_slots: int
    switch_slots: int
    trays: dict[int, TrayView] = field(default_factory=dict)  # slot → tray
    cliques: list[CliqueSummary] = field(default_factory=list)
    url: str = ""
    pk: int = 0
    kind: str = ""
    # The Fleet's elevations also draw these (`portal.web.elevation`).
    parts: list[Part] = field(default_factory=list)
    windows: list[WindowMark] = field(default_factory=list)
    matches: frozenset[int] | None = None  # trays matching the Fleet's filters; None: all

    @property
    def free(self) -> int:
        return sum(c.free for c in self.cliques)

    @property
    def domains_here(self) -> list[tuple[DomainTag, int]]:
        """Each domain on the rack's trays with how many of them it holds, by name."""
        held: dict[str, tuple[DomainTag, int]] = {}
        for tray in self.trays.values():
            if tray.domain is not None:
                key = tray.domain.uid or tray.domain.label
                tag, count = held.get(key, (tray.domain, 0))
                held[key] = (tag, count + 1)
        return sorted(held.values(), key=lambda pair: pair[0].label)

    @property
    def gpu_alert_trays(self) -> list[TrayView]:
        """Its trays whose GPUs need attention, by slot."""
        return [self.trays[s] for s in sorted(self.trays) if self.trays[s].alert_kinds]

    @property
    def parts_down(self) -> list[Part]:
        return [p for p in self.parts if p.state == "down"]


@dataclass(frozen=True)
class Visibility:
    """What one viewer may know of the domains on the trays (decided once per page)."""

    operator: bool
    own_namespaces: frozenset[int]  # the namespaces a tenant sees domains of by name

    @classmethod
    def of(cls, viewer: Viewer) -> Visibility:
        if is_operator(viewer):
            return cls(operator=True, own_namespaces=frozenset())
        ids = namespaces_visible_to(viewer).values_list("pk", flat=True)
        return cls(operator=False, own_namespaces=frozenset(ids))

    def sees(self, holder: Holder) -> bool:
        return self.operator or holder.namespace_id in self.own_namespaces


def fabric_view(
    *,
    viewer: Viewer,
    rack_names: Iterable[str] | None = None,
    highlight: Iterable[int] = (),
    links: bool = True,
    preview: bool = True,
) -> list[RackView]:
    """Every rack (or the named ones) with trays, GPUs, domains and clique summaries;
    `highlight` marks where a request would land (`preview`) or a domain's own trays."""
    return draw_racks(
        fabric_read(rack_names=rack_names),
        Visibility.of(viewer),
        highlight=highlight,
        links=links,
        preview=preview,
    )


def draw_racks(
    read: FabricRead,
    visibility: Visibility,
    *,
    rack_names: Iterable[str] | None = None,
    highlight: Iterable[int] = (),
    links: bool = True,
    preview: bool = True,
) -> list[RackView]:
    """The read's racks (or the named ones among them) as this viewer sees them: no query."""
    wanted_racks = None if rack_names is None else set(rack_names)
    racks = {
        r.pk: _rack_view(r, visibility, links)
        for r in read.racks
        if wanted_racks is None or r.name in wanted_racks
    }
    names = {r.name for r in read.racks if r.pk in racks}
    # Only the drawn racks' cliques: the topology is the whole fleet (18,000 trays at 1,000).
    status = {
        t.node_id: t.status for c in read.topology.cliques if c.rack in names for t in c.trays
    }
    marked = set(highlight)
    for node in read.trays:
        rack = racks.get(node.rack_id) if node.rack_id is not None else None
        if rack is None or node.slot is None:
            continue
        tray = _tray_view(node, read, status, visibility, links, marked)
        tray.preview = preview
        rack.trays[node.slot] = tray
    by_name = {r.name: r for r in racks.values()}
    for summary in read.summaries:
        if summary.rack in by_name:
            rack = by_name[summary.rack]
            rack.cliques.append(summary)
    return list(racks.values())


def _rack_view(rack: Rack, visibility: Visibility, links: bool) -> RackView:
    url = reverse("operator:rack", args=[rack.name]) if visibility.operator and links else ""
    return RackView(
        rack.name,
        rack.location,
        rack.compute_slots,
        rack.switch_slots,
        url=url,
        pk=rack.pk,
        kind=rack.kind,
    )


def _tray_view(
    node: Node,
    read: FabricRead,
    status: dict[int, str],
    visibility: Visibility,
    links: bool,
    marked: set[int],
) -> TrayView:
    operator = visibility.operator
    holder = read.holders.get(node.pk)
    return TrayView(
        node_id=node.pk,
        hostname=node.hostname,
        slot=node.slot or 0,
        state=node.state,
        status=status.get(node.pk, node.state if node.state != "ready" else "unknown"),
        clique_id=node.clique_id,
        clique_name=(node.clique.name or node.clique.label) if node.clique else "",
        last_heartbeat=node.last_heartbeat,
        # A tenant learns nothing of other tenants' trays beyond "in use".
        daemon_state=node.daemon_state if operator else "",
        gpus=_gpus(read.gpus.get(node.pk, []), visibility, holder),
        domain=_tag(holder, visibility, links) if holder is not None else None,
        url=reverse("operator:node", args=[node.hostname]) if operator and links else "",
        highlight=node.pk in marked,
    )


def _gpus(cells: list[GpuCell], visibility: Visibility, holder: Holder | None) -> list[GpuCell]:
    """The GPUs as this viewer sees them: a tenant learns the health readings (XIDs,
    NVLink errors, heat) of their own domains' trays only."""
    if visibility.operator or (holder is not None and visibility.sees(holder)):
        return cells
    return [replace(c, alerts=(), temperature_c=None) for c in cells]


def _tag(holder: Holder, visibility: Visibility, links: bool) -> DomainTag:
    """How this viewer sees the domain holding a tray."""
    if not visibility.sees(holder):
        return ANONYMOUS
    url = reverse("tenant:domain", args=[holder.namespace_name, holder.uid]) if links else ""
    return DomainTag(
        label=f"{holder.namespace_name}/{holder.name}" if visibility.operator else holder.name,
        url=url,
        uid=holder.uid,
        phase=holder.phase,
        domain_id=holder.domain_id,
    )
