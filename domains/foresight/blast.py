"""Blast radius: which live domains, tenants and GPUs are hit if a part of the fabric goes
down or is drained for service.

    scope = scope_named("tray", "gb-r01-t03")        # or rack_scope(rack), trays_scope(nodes) …
    radius = blast_radius(scope)                      # everything (operators)
    radius = blast_radius_for(request.user, scope)    # what this viewer may see

What "hit" means depends on the part (`BlastRadius.hit`):

- **down** — compute trays stop (a tray, a set of trays, a clique, a rack; a power shelf
  whose loss leaves the busbar short; the last NVLink switch tray of a rack). Each domain
  holding one of them loses those members: its IMEX domain turns Degraded and the workload
  ranks on those trays die (`DomainHit.trays` names them).
- **bandwidth** — nothing stops, but every GPU of the rack loses part of its NVLink
  bandwidth. Each GPU has 18 NVLink links, two to each of the rack's nine switch trays, so
  every clique of the rack runs over every switch tray: one tray out costs each GPU 2 of
  18 links (11%). Every live domain in the rack is hit.
- **redundancy** — nothing stops and nothing slows: the rack's power shelves all feed one
  DC busbar, so one shelf out lowers the capacity left for the rack's load. The answer
  says how many more shelves may fail before the load is no longer carried; past that
  point which trays the rack would shed is not knowable here, so every tray counts as
  down.

Assumptions (documented in docs/features.md, "Blast radius"): a GB200 compute tray draws
at most 5.4 kW and a switch tray 0.4 kW; each shelf's capacity is its PSU count times PSU
watts (NVIDIA's reference: 6 PSUs of 5.5 kW). Only domains holding trays count as live
here (Forming, Ready, Degraded): queued domains hold nothing yet and Releasing ones are
already going.

Each call is a constant number of queries, however large the scope.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from domains.computedomains.models import DomainMember
from domains.computedomains.selectors import RUNNING_PHASES
from domains.errors import InvalidInput, NotFound
from domains.inventory.models import Clique, Node, PartState, PowerShelf, Rack, SwitchTray
from domains.tenancy.selectors import Viewer, visible_namespace_ids

DOWN = "down"
BANDWIDTH = "bandwidth"
REDUNDANCY = "redundancy"

HIT_WORDS = {
    DOWN: "trays go down",
    BANDWIDTH: "NVLink bandwidth drops",
    REDUNDANCY: "power redundancy drops",
}

# Power draw the busbar must carry (see the module docstring).
COMPUTE_TRAY_WATTS = 5400
SWITCH_TRAY_WATTS = 400

SCOPE_KINDS = ("tray", "switch_tray", "rack", "clique", "power_shelf")


@dataclass(frozen=True)
class Scope:
    """A part of the fabric (or a set of trays) whose loss is in question."""

    kind: str  # tray | trays | switch_tray | rack | clique | power_shelf
    name: str  # hostname, rack name, clique label, switch tray or shelf name; "3 trays"
    node_ids: tuple[int, ...] = ()  # compute trays it takes down outright
    rack_id: int | None = None  # the rack a switch tray or power shelf sits in
    part_id: int | None = None  # the switch tray or power shelf


@dataclass(frozen=True)
class DomainHit:
    """One live domain and what the loss does to it."""

    uid: str
    name: str
    namespace: str
    namespace_id: int
    phase: str
    hit: str  # down | bandwidth
    trays: tuple[str, ...]  # its trays that go down (down), or all its trays (bandwidth)
    trays_total: int  # trays the domain holds
    gpus: int  # its GPUs hit
    lease_expires_at: datetime | None

    @property
    def effect(self) -> str:
        """'loses 2 of 4 trays (8 GPUs)' / 'loses all 2 trays' / 'runs slower'."""
        if self.hit == BANDWIDTH:
            return f"keeps its {self.trays_total} trays; its {self.gpus} GPUs lose NVLink bandwidth"
        if len(self.trays) >= self.trays_total:
            return f"loses all {self.trays_total} trays ({self.gpus} GPUs)"
        return f"loses {len(self.trays)} of {self.trays_total} trays ({self.gpus} GPUs)"


@dataclass(frozen=True)
class PowerBudget:
    """The rack's power after a shelf is lost."""

    shelves_total: int
    shelves_up_after: int
    capacity_after_watts: int
    load_watts: int
    spare_shelves: int  # how many more shelves may fail before the load is not carried

    @property
    def carried(self) -> bool:
        return self.capacity_after_watts >= self.load_watts


@dataclass(frozen=True)
class BlastRadius:
    """What losing `scope` does, as far as the viewer it was made for may know."""

    scope: Scope
    hit: str  # down | bandwidth | redundancy
    summary: str  # one human sentence
    trays_down: tuple[str, ...]  # compute trays that stop, by hostname
    gpus_down: int  # GPUs on those trays, free ones included (capacity lost)
    domains: tuple[DomainHit, ...]  # the live domains hit that the viewer may see
    tenants: tuple[str, ...]  # their namespaces
    gpus_hit: int  # GPUs of those domains that are hit
    bandwidth_loss: float = 0.0  # share of each GPU's NVLink bandwidth lost (0..1)
    power: PowerBudget | None = None
    hidden_trays: int = 0  # trays hit that belong to domains the viewer may not see
    hidden_gpus: int = 0  # and their GPUs

    @property
    def harmless(self) -> bool:
        return not self.domains and not self.hidden_trays and not self.hidden_gpus


# --- scopes -------------------------------------------------------------------------------


def tray_scope(node: Node) -> Scope:
    return Scope("tray", node.hostname, node_ids=(node.pk,), rack_id=node.rack_id)


def trays_scope(nodes: Iterable[Node]) -> Scope:
    """Several trays at once (a bulk drain): their losses add up per domain."""
    nodes = list(nodes)
    if len(nodes) == 1:
        return tray_scope(nodes[0])
    return Scope("trays", f"{len(nodes)} trays", node_ids=tuple(n.pk for n in nodes))


def rack_scope(rack: Rack) -> Scope:
    ids = tuple(Node.objects.filter(rack=rack).order_by("slot").values_list("pk", flat=True))
    return Scope("rack", rack.name, node_ids=ids, rack_id=rack.pk)


def clique_scope(clique: Clique) -> Scope:
    ids = tuple(Node.objects.filter(clique=clique).order_by("slot").values_list("pk", flat=True))
    return Scope("clique", clique.label, node_ids=ids, rack_id=clique.rack_id)


def switch_tray_scope(tray: SwitchTray) -> Scope:
    return Scope("switch_tray", tray.name, rack_id=tray.rack_id, part_id=tray.pk)


def power_shelf_scope(shelf: PowerShelf) -> Scope:
    return Scope("power_shelf", shelf.name, rack_id=shelf.rack_id, part_id=shelf.pk)


def scope_named(kind: str, name: str) -> Scope:
    """The scope of a part named the way the API names it; errors name the field."""
    if kind == "tray":
        node = Node.objects.filter(hostname=name).first()
        if node is not None:
            return tray_scope(node)
    elif kind == "rack":
        rack = Rack.objects.filter(name=name).first()
        if rack is not None:
            return rack_scope(rack)
    elif kind == "clique":
        clique = clique_by_label(name)
        if clique is not None:
            return clique_scope(clique)
    elif kind == "switch_tray":
        switch = SwitchTray.objects.filter(name=name).first()
        if switch is not None:
            return switch_tray_scope(switch)
    elif kind == "power_shelf":
        shelf = PowerShelf.objects.filter(name=name).first()
        if shelf is not None:
            return power_shelf_scope(shelf)
    else:
        raise InvalidInput(f"must be one of {', '.join(SCOPE_KINDS)}", field="kind")
    raise NotFound(f"no {kind.replace('_', ' ')} named {name!r}", field="name")


def clique_by_label(label: str) -> Clique | None:
    uuid, _, number = label.rpartition(".")
    if uuid and (number.isascii() and number.isdigit()):
        return Clique.objects.filter(cluster_uuid=uuid, clique_id=int(number)).first()
    return Clique.objects.filter(name=label).first()


# --- the radius ---------------------------------------------------------------------------


def blast_radius(scope: Scope) -> BlastRadius:
    """Everything losing `scope` would hit, every namespace's domains named (operators)."""
    if scope.kind == "switch_tray":
        return _switch_tray(scope)
    if scope.kind == "power_shelf":
        return _power_shelf(scope)
    return _down(scope, scope.node_ids)


def blast_radius_for(viewer: Viewer, scope: Scope) -> BlastRadius:
    """As `blast_radius`, with other tenants' domains only counted: a tenant sees their own
    domains by name and, of anyone else's, how many trays and GPUs are hit."""
    return redact(blast_radius(scope), visible_namespace_ids(viewer))


def redact(radius: BlastRadius, visible: set[int] | None) -> BlastRadius:
    """The radius as seen by someone who may see the namespaces `visible` (None: all)."""
    if visible is None:
        return radius
    shown = tuple(d for d in radius.domains if d.namespace_id in visible)
    hidden = [d for d in radius.domains if d.namespace_id not in visible]
    return replace(
        radius,
        domains=shown,
        tenants=tuple(sorted({d.namespace for d in shown})),
        gpus_hit=sum(d.gpus for d in shown),
        hidden_trays=radius.hidden_trays + sum(len(d.trays) for d in hidden),
        hidden_gpus=radius.hidden_gpus + sum(d.gpus for d in hidden),
    )


def _down(scope: Scope, node_ids: Iterable[int], *, why: str = "") -> BlastRadius:
    ids = list(node_ids)
    trays = list(Node.objects.filter(pk__in=ids).values_list("hostname", "gpu_count"))
    domains = domains_on(ids, hit=DOWN)
    summary = why or _down_summary(scope, len(trays), domains)
    return BlastRadius(
        scope=scope,
        hit=DOWN,
        summary=summary,
        trays_down=tuple(h for h, _ in trays),
        gpus_down=sum(g for _, g in trays),
        domains=domains,
        tenants=_tenants(domains),
        gpus_hit=sum(d.gpus for d in domains),
    )


def _down_summary(scope: Scope, trays: int, domains: tuple[DomainHit, ...]) -> str:
    """In words, e.g. "2 trays stop; 1 live domain, in 1 namespace, loses trays and turns
    Degraded"."""
    what = "1 tray stops" if trays == 1 else f"{trays} trays stop"
    if not domains:
        return f"{what}; no live domain runs there"
    tenants = len(_tenants(domains))
    one = len(domains) == 1
    return (
        f"{what}; {len(domains)} live domain{'' if one else 's'}, in {tenants} "
        f"namespace{'' if tenants == 1 else 's'}, {'loses' if one else 'lose'} trays and "
        f"turn{'s' if one else ''} Degraded"
    )


def _part_rack(scope: Scope) -> int:
    """The rack of a switch tray or power shelf (parts always belong to one)."""
    if scope.rack_id is None:
        raise InvalidInput(f"{scope.name} belongs to no rack", field="name")
    return scope.rack_id


def _switch_tray(scope: Scope) -> BlastRadius:
    rack_id = _part_rack(scope)
    states = list(SwitchTray.objects.filter(rack_id=rack_id).values_list("pk", "state"))
    total = len(states)
    down_after = sum(1 for pk, s in states if s == PartState.DOWN or pk == scope.part_id)
    rack_trays = list(Node.objects.filter(rack_id=rack_id).values_list("pk", flat=True))
    if down_after >= total:
        why = "no NVLink switch tray would be left in the rack: no tray reaches another"
        return _down(scope, rack_trays, why=why)
    loss = down_after / total
    domains = domains_on(rack_trays, hit=BANDWIDTH)
    summary = (
        f"every GPU of the rack loses {loss:.0%} of its NVLink bandwidth "
        f"({down_after} of {total} switch trays out); no tray stops"
    )
    if domains:
        summary += f"; {len(domains)} live domain{'s' if len(domains) != 1 else ''} run slower"
    return BlastRadius(
        scope=scope,
        hit=BANDWIDTH,
        summary=summary,
        trays_down=(),
        gpus_down=0,
        domains=domains,
        tenants=_tenants(domains),
        gpus_hit=sum(d.gpus for d in domains),
        bandwidth_loss=loss,
    )


def _power_shelf(scope: Scope) -> BlastRadius:
    rack_id = _part_rack(scope)
    shelves = list(
        PowerShelf.objects.filter(rack_id=rack_id).values_list(
            "pk", "state", "psu_count", "psu_watts"
        )
    )
    up = [(n * w) for pk, s, n, w in shelves if s != PartState.DOWN and pk != scope.part_id]
    rack_trays = list(Node.objects.filter(rack_id=rack_id).values_list("pk", flat=True))
    switches = SwitchTray.objects.filter(rack_id=rack_id).count()
    load = len(rack_trays) * COMPUTE_TRAY_WATTS + switches * SWITCH_TRAY_WATTS
    capacity = sum(up)
    spare = _spare_shelves(sorted(up), capacity, load)
    budget = PowerBudget(len(shelves), len(up), capacity, load, spare)
    if not budget.carried:
        why = (
            f"the {len(up)} shelves left carry {capacity / 1000:.1f} kW of the rack's "
            f"{load / 1000:.1f} kW: every tray of the rack may go down"
        )
        return replace(_down(scope, rack_trays, why=why), power=budget)
    summary = (
        f"no tray stops: {len(up)} of {len(shelves)} shelves carry {capacity / 1000:.1f} kW "
        f"for a load of at most {load / 1000:.1f} kW; {spare} more may fail"
    )
    return BlastRadius(
        scope=scope,
        hit=REDUNDANCY,
        summary=summary,
        trays_down=(),
        gpus_down=0,
        domains=(),
        tenants=(),
        gpus_hit=0,
        power=budget,
    )


def _spare_shelves(capacities: list[int], capacity: int, load: int) -> int:
    """How many more shelves may fail (the largest first, the worst case) while the load
    is still carried."""
    spare = 0
    for watts in reversed(capacities):
        if capacity - watts < load:
            break
        capacity -= watts
        spare += 1
    return spare


def domains_on(node_ids: Iterable[int], *, hit: str = DOWN) -> tuple[DomainHit, ...]:
    """The live domains holding any of these trays, with the trays each would lose."""
    return hits_from(member_rows(node_ids), hit=hit)


MemberRow = tuple[int, str, Any, str, int, str, str, int, int, datetime | None]


def member_rows(node_ids: Iterable[int]) -> list[MemberRow]:
    """One row per tray of these held by a live domain: (tray id, hostname, domain uid,
    name, namespace id and name, phase, trays, GPUs per tray, lease end), in one query."""
    return list(
        DomainMember.objects.filter(
            active=True, node_id__in=list(node_ids), domain__phase__in=RUNNING_PHASES
        )
        .order_by("domain__namespace__name", "domain__name", "index")
        .values_list(
            "node_id", "node__hostname", "domain__uid", "domain__name", "domain__namespace_id",
            "domain__namespace__name", "domain__phase", "domain__num_nodes",
            "domain__gpus_per_node", "domain__lease_expires_at",
        )
    )  # fmt: skip


def hits_from(rows: Iterable[MemberRow], *, hit: str = DOWN) -> tuple[DomainHit, ...]:
    """`member_rows` folded into one DomainHit per domain."""
    hits: dict[str, DomainHit] = {}
    for _, host, uid, name, ns_id, ns, phase, num_nodes, gpus, lease in rows:
        key = str(uid)
        found = hits.get(key)
        trays = (*found.trays, host) if found else (host,)
        hits[key] = DomainHit(
            uid=key,
            name=name,
            namespace=ns,
            namespace_id=ns_id,
            phase=phase,
            hit=hit,
            trays=trays,
            trays_total=num_nodes,
            gpus=len(trays) * gpus,
            lease_expires_at=lease,
        )
    return tuple(hits.values())


def _tenants(domains: Iterable[DomainHit]) -> tuple[str, ...]:
    return tuple(sorted({d.namespace for d in domains}))
