"""The fleet view: every rack as one compact heat-map tile, a summary band and filters, for
2 racks or 1,000.

One read whatever the fleet's size: placement's snapshot (three queries: each tray's one
status, `traytruth`, its clique and rack), the domain holding each tray and the number of
domains per phase — six queries for 2 racks or for 1,000. The tiles are built as one
string, like the rack drawings: 18,000 tray cells must cost milliseconds, not a template
loop each.

A chosen domain (`?domain=<uid or namespace/name>`) is outlined from the same read: its
trays' cells on every rack it spans, those racks first, and a line naming them and its
cliques. Each tile says which domain holds each of its cells (a letter per cell for the
tile's domains, each an index into one list of the page's domains by namespace), so
hovering a cell can name it without a query or a title per cell.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.urls import reverse
from django.utils.html import escape, json_script
from django.utils.safestring import SafeString, mark_safe

from domains.computedomains.admission import smallest_request
from domains.computedomains.fabric import FleetHolder, fleet_holders, topology_snapshot
from domains.computedomains.models import Phase
from domains.computedomains.selectors import domain_phase_counts
from domains.computedomains.traytruth import NOT_READY, STATUS_WORDS
from domains.inventory.models import Rack
from domains.inventory.parts import parts_of_racks, windows_on_racks
from domains.placement.algorithm import clique_summaries
from domains.placement.model import CliqueSummary, Topology, TrayStatus
from portal.web.fabric import RackView

# What the state filter offers: a word each, and the tray statuses it covers. Each tray has
# exactly one status (`traytruth`): the filters, like the band's columns, are a partition.
STATE_FILTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "free": ("free", (TrayStatus.FREE,)),
    "in_use": ("in use", (TrayStatus.IN_USE,)),
    "cordoned": ("cordoned", (TrayStatus.CORDONED,)),
    "draining": ("draining", (TrayStatus.DRAINING,)),
    "down": ("down", (TrayStatus.DOWN,)),
    "not_ready": (
        "not ready (agent silent, never heard from, condition, no address, clique of another rack)",
        NOT_READY,
    ),
}
# One short class per status for the heat-map cells (kept short: 18,000 of them).
CELL_CLASS = {
    TrayStatus.FREE: "f",
    TrayStatus.IN_USE: "u",
    TrayStatus.CORDONED: "c",
    TrayStatus.DRAINING: "c",
    TrayStatus.DOWN: "d",
    TrayStatus.STALE: "s",
}
# The band's column of each status: free, used, cordoned, draining, down or not ready.
COLUMN: dict[str, str] = {
    TrayStatus.FREE: "free",
    TrayStatus.IN_USE: "used",
    TrayStatus.CORDONED: "cordoned",
    TrayStatus.DRAINING: "draining",
    TrayStatus.DOWN: "down",
    **dict.fromkeys(NOT_READY, "not_ready"),
}


@dataclass(frozen=True, slots=True)
class FleetTray:
    node_id: int
    hostname: str
    slot: int
    status: str  # its one status (`traytruth`)
    held: bool  # a live domain holds it (whatever its status)
    gpus: int
    clique_id: int
    namespace: str  # of the domain holding it, "" when free
    domain: FleetHolder | None  # the live domain holding it


@dataclass
class RackTile:
    name: str
    trays: list[FleetTray] = field(default_factory=list)
    match: bool = True  # shown (and not dimmed) under the current filters


@dataclass(frozen=True)
class Filters:
    state: str = ""
    tenant: str = ""
    clique: str = ""  # a clique's label or name
    q: str = ""  # hostname search
    domain: str = ""  # a live domain to outline (uid or namespace/name): picks, not filters

    @property
    def active(self) -> bool:
        return bool(self.state or self.tenant or self.clique or self.q)


@dataclass(frozen=True)
class Outline:
    """The chosen domain on the Fleet: the racks and cliques its trays are in."""

    wanted: str
    holder: FleetHolder | None  # None: no live domain by that uid or name holds trays
    racks: list[tuple[str, int]] = field(default_factory=list)  # (rack, its trays there)
    cliques: int = 0
    trays: frozenset[int] = frozenset()


@dataclass
class Band:
    """The summary band: GPUs and trays by what they are doing, domains needing eyes.

    The columns are a partition: each tray counts in exactly one (its status), so they add
    up to the total; `held` says how many of each column a domain holds ("of which in use
    by a domain": a cordoned, down or silent tray may still be one)."""

    trays: Counter[str] = field(default_factory=Counter)
    gpus: Counter[str] = field(default_factory=Counter)
    held: Counter[str] = field(default_factory=Counter)
    pending: int = 0
    degraded: int = 0
    stranded: int = 0
    racks: int = 0

    def count(self, kinds: Counter[tuple[str, bool, int]]) -> None:
        """From (status, held, GPUs) → trays: a tray counts in `total` and in its column."""
        for (status, held, gpus), n in kinds.items():
            column = COLUMN.get(status, "not_ready")
            for key in ("total", column):
                self.trays[key] += n
                self.gpus[key] += n * gpus
                if held:
                    self.held[key] += n


@dataclass
class Fleet:
    band: Band
    tiles: list[RackTile]
    summaries: list[CliqueSummary]
    topology: Topology
    namespaces: list[str]
    cliques: list[tuple[str, str]]  # (label, name) for the clique filter
    matches: list[FleetTray]  # trays matching the filters (hostname search results)
    filters_active: bool = False
    spans: dict[FleetHolder, set[str]] = field(default_factory=dict)  # domain → its racks
    outline: Outline | None = None

    @property
    def shown(self) -> list[RackTile]:
        return [t for t in self.tiles if t.match]

    @property
    def outlined(self) -> frozenset[int]:
        """The chosen domain's trays, to outline on the elevations."""
        return self.outline.trays if self.outline else frozenset()

    @property
    def matching_ids(self) -> frozenset[int] | None:
        """The trays matching the filters, to pick out on the elevations; None: no filter."""
        return frozenset(t.node_id for t in self.matches) if self.filters_active else None


def fleet(filters: Filters) -> Fleet:
    """Every rack as a tile, the band and the trays matching `filters` (constant queries)."""
    topology = topology_snapshot()
    holders = fleet_holders()  # tray id → the domain holding it
    tiles = {name: RackTile(name) for name in Rack.objects.order_by("position", "name")
             .values_list("name", flat=True)}  # fmt: skip
    band = Band(racks=len(tiles))
    wanted_clique = _clique_ids(topology, filters.clique)
    matches: list[FleetTray] = []
    kinds: Counter[tuple[str, bool, int]] = Counter()
    spans: dict[FleetHolder, set[str]] = defaultdict(set)
    for clique in topology.cliques:
        tile = tiles.get(clique.rack)
        for t in clique.trays:
            kinds[t.status, t.held, t.gpu_count] += 1
            holder = holders.get(t.node_id)
            tray = FleetTray(
                t.node_id, t.hostname, t.slot, t.status, t.held, t.gpu_count,
                clique.clique_id, holder.namespace if holder else "", holder,
            )  # fmt: skip
            if tile is not None:
                tile.trays.append(tray)
                if holder is not None:
                    spans[holder].add(tile.name)
            if filters.active and _matches(tray, filters, wanted_clique):
                matches.append(tray)
    band.count(kinds)
    summaries = clique_summaries(topology, smallest_request=smallest_request())
    band.stranded = sum(s.stranded for s in summaries)
    phases = domain_phase_counts()
    band.pending, band.degraded = phases.get(Phase.PENDING, 0), phases.get(Phase.DEGRADED, 0)
    for tile in tiles.values():
        tile.trays.sort(key=lambda tray: tray.slot)
        if filters.active:
            tile.match = any(_matches(t, filters, wanted_clique) for t in tile.trays)
    ordered = list(tiles.values())
    outline = _outline(ordered, holders, filters.domain)
    if outline is not None:  # the racks it spans first, in the fleet's order
        spanned = {rack for rack, _ in outline.racks}
        ordered.sort(key=lambda tile: tile.name not in spanned)
    return Fleet(
        band=band,
        tiles=ordered,
        summaries=summaries,
        topology=topology,
        namespaces=sorted({h.namespace for h in holders.values()}),
        cliques=[(c.label, c.name) for c in topology.cliques],
        matches=matches,
        filters_active=filters.active,
        spans=spans,
        outline=outline,
    )


def _outline(tiles: list[RackTile], holders: dict[int, FleetHolder], wanted: str) -> Outline | None:
    """The domain `wanted` names (its uid or namespace/name) on the tiles: no query."""
    wanted = wanted.strip().lower()
    if not wanted:
        return None
    holder = next((h for h in set(holders.values()) if wanted in (h.uid, h.label)), None)
    if holder is None:
        return Outline(wanted, None)
    racks: list[tuple[str, int]] = []
    cliques: set[int] = set()
    trays: set[int] = set()
    for tile in tiles:
        mine = [t for t in tile.trays if t.domain is holder]
        if mine:
            racks.append((tile.name, len(mine)))
            cliques.update(t.clique_id for t in mine)
            trays.update(t.node_id for t in mine)
    return Outline(wanted, holder, racks, len(cliques), frozenset(trays))


def dress_racks(
    racks: list[RackView],
    *,
    now: datetime,
    matches: frozenset[int] | None = None,
    outline: frozenset[int] = frozenset(),
) -> None:
    """Give the page's racks what their elevations draw besides trays: switch trays and
    power shelves, maintenance windows, which trays to pick out (`matches`; None: all) and
    which to outline as the chosen domain's (`outline`). Three queries whatever the number
    of racks; none without racks."""
    if not racks:
        return
    ids = [r.pk for r in racks]
    parts, windows = parts_of_racks(ids), windows_on_racks(ids, now)
    for rack in racks:
        rack.parts = parts.get(rack.pk, [])
        rack.windows = windows.get(rack.pk, [])
        rack.matches = matches
        for tray in rack.trays.values():
            if tray.node_id in outline:
                tray.highlight, tray.preview = True, False  # "a tray of this domain"


def _clique_ids(topology: Topology, wanted: str) -> set[int] | None:
    if not wanted:
        return None
    return {c.clique_id for c in topology.cliques if wanted in (c.label, c.name)}


def _matches(tray: FleetTray, filters: Filters, cliques: set[int] | None) -> bool:
    if filters.state and tray.status not in STATE_FILTERS.get(filters.state, ("", ()))[1]:
        return False
    if filters.tenant and tray.namespace != filters.tenant:
        return False
    if cliques is not None and tray.clique_id not in cliques:
        return False
    return not filters.q or filters.q.lower() in tray.hostname.lower()


def heatmap_html(fleet: Fleet, filters: Filters) -> tuple[SafeString, SafeString]:
    """Every shown rack as a link with one small cell per tray, coloured by status; a cell
    that does not match the filters is dimmed, one of the chosen domain's is outlined.
    Which domain holds each cell is in the tiles' `data-d`/`data-h` (`_held_attrs`),
    indexing the list returned beside them (a JSON script). Every value is escaped."""
    rack_url = reverse("operator:rack", args=["RACK"])
    cliques = _clique_ids(fleet.topology, filters.clique)
    chosen = fleet.outline.holder if fleet.outline else None
    shown = fleet.shown
    index, domains = _domain_index(shown)
    parts = []
    for tile in shown:
        counts = Counter(t.status for t in tile.trays)
        words = ", ".join(f"{n} {STATUS_WORDS.get(s, s)}" for s, n in sorted(counts.items()))
        name = escape(tile.name)
        cells = "".join(_cell(t, filters, cliques, chosen) for t in tile.trays)
        mine = sum(1 for t in tile.trays if t.domain is chosen) if chosen is not None else 0
        held = _held_attrs(tile.trays, index)
        parts.append(
            f'<a class="hm{" hm-in" if mine else ""}" href="{rack_url.replace("RACK", name)}" '
            f'data-rack="{name}"{held} title="{name}: {escape(words) or "no trays"}">'
            f'<span class="hm-n">{_tile_name(name, mine, chosen)}</span>'
            f'<span class="hm-c"{HIDDEN if mine else ""}>{cells}</span></a>'
        )
    return mark_safe("".join(parts)), domains  # noqa: S308 - escaped above


# The outlined cells' titles stay out of the tile link's name (its text says it already).
HIDDEN = ' aria-hidden="true"'


def _domain_index(tiles: list[RackTile]) -> tuple[dict[FleetHolder, int], SafeString]:
    """The domains holding trays of `tiles`, each with its index in the list the page gets
    as JSON, `[[namespace, [name, …]], …]` (each namespace written once: 5,000 domains at
    1,000 racks), read in that order."""
    held = {t.domain for tile in tiles for t in tile.trays if t.domain is not None}
    ordered = sorted(held, key=lambda h: (h.namespace, h.name))
    groups: dict[str, list[str]] = defaultdict(list)
    for holder in ordered:
        groups[holder.namespace].append(holder.name)
    index = {holder: i for i, holder in enumerate(ordered)}
    return index, json_script(list(groups.items()), "hm-domains")


def _held_attrs(trays: list[FleetTray], index: dict[FleetHolder, int]) -> str:
    """`data-d`: the indexes of the domains on a tile; `data-h`: one character per cell,
    "." for none, else the letter of its domain among those (a for the first, b, …)."""
    local: dict[FleetHolder, str] = {}
    cells = []
    for tray in trays:
        holder = tray.domain
        if holder is None:
            cells.append(".")
        else:
            letter = local.get(holder)
            if letter is None:
                letter = local[holder] = _letter(len(local))
            cells.append(letter)
    if not local:
        return ""
    return f' data-d="{" ".join(str(index[h]) for h in local)}" data-h="{"".join(cells)}"'


def _letter(n: int) -> str:
    return chr(97 + n) if n < 26 else chr(0x100 + n)  # a-z, then letters past Latin-1


def _tile_name(name: str, mine: int, chosen: FleetHolder | None) -> str:
    if not mine or chosen is None:
        return name
    whose = escape(chosen.label)
    return (
        f'<span aria-hidden="true">▶ </span>{name}'
        f'<span class="visually-hidden">: {mine} tray{"s" if mine > 1 else ""} of {whose}</span>'
    )


def _cell(
    tray: FleetTray, filters: Filters, cliques: set[int] | None, chosen: FleetHolder | None
) -> str:
    css = CELL_CLASS.get(tray.status, "n")
    if tray.held and tray.status != TrayStatus.IN_USE:
        css += " x"  # flagged (or silent) and held by a domain: both shown
    if filters.active and not _matches(tray, filters, cliques):
        css += " o"
    if chosen is not None and tray.domain is chosen:
        return f'<i class="{css} m" title="{escape(chosen.label)}: {escape(tray.hostname)}"></i>'
    return CELLS.get(css) or f'<i class="{css}"></i>'


# The common cells, made once: 18,000 of them on a 1,000-rack page.
CELLS = {
    css: f'<i class="{css}"></i>' for css in ("f", "u", "c", "d", "s", "n", "c x", "d x", "s x")
}


def heatmap_context(fleet: Fleet, filters: Filters) -> dict[str, object]:
    """What the page's heat-map and toolbar draw from the read: the tiles, the domains
    they index, the chosen domain's outline and the fields' suggestions."""
    heatmap, domains = heatmap_html(fleet, filters)
    return {
        "heatmap": heatmap,
        "heatmap_domains": domains,
        "outline": fleet.outline,
        "clique_options": clique_options(fleet),
        "domain_options": domain_options(fleet),
    }


def tenant_trays(fleet: Fleet) -> dict[str, int]:
    """Trays held per tenant (for the tenant filter's labels)."""
    counts: dict[str, int] = defaultdict(int)
    for tile in fleet.tiles:
        for tray in tile.trays:
            if tray.namespace:
                counts[tray.namespace] += 1
    return dict(counts)


CLIQUE_SUGGESTIONS = 300  # past this many, the clique filter is typed without a list


def domain_options(fleet: Fleet) -> SafeString:
    """`<option>`s for the domain field's suggestions: the live domains over several racks
    (the ones worth outlining), by name, as one string."""
    spanning = sorted((h.label, len(r)) for h, r in fleet.spans.items() if len(r) > 1)
    return mark_safe(  # noqa: S308 - every value escaped
        "".join(
            f'<option value="{escape(label)}">spans {racks} racks</option>'
            for label, racks in spanning[:CLIQUE_SUGGESTIONS]
        )
    )


def clique_options(fleet: Fleet) -> SafeString:
    """`<option>`s for the clique filter's suggestion list, built as one string."""
    if len(fleet.cliques) > CLIQUE_SUGGESTIONS:
        return mark_safe("")
    return mark_safe(  # noqa: S308 - every value escaped
        "".join(
            f'<option value="{escape(label)}">{escape(name)}</option>'
            for label, name in fleet.cliques
        )
    )
