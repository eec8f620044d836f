"""What software each tray runs (NVIDIA driver, nvidia-imex, the agent, the GPUs' VBIOS)
and where the fleet has drifted apart.

IMEX needs one driver version on every member of a domain: its daemons refuse peers of
another version (VERSION_MISMATCH), so a domain placed across trays with different drivers
never forms. The fleet's *usual* version of each (the one most trays run) is what a tray is
compared with; a clique whose trays run more than one driver is named, as a domain placed
on it could land across them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from domains.inventory.models import Gpu, Node

COMPONENTS = {"driver": "Driver", "imex": "IMEX", "agent": "Agent", "vbios": "VBIOS"}


@dataclass
class TrayVersions:
    hostname: str
    rack: str
    slot: int | None
    clique: str
    versions: dict[str, str]  # component → version ("" unknown; VBIOSes joined by ", ")
    drift: list[str] = field(default_factory=list)  # components off the fleet's usual

    def off(self, component: str) -> bool:
        return component in self.drift


@dataclass
class FleetVersions:
    trays: list[TrayVersions]
    usual: dict[str, str]  # component → the version most trays run
    counts: dict[str, list[tuple[str, int]]]  # component → (version, trays), most first
    mixed_cliques: dict[str, list[tuple[str, int]]]  # clique → its drivers, most first

    @property
    def drifted(self) -> list[TrayVersions]:
        return [t for t in self.trays if t.drift]


def fleet_versions() -> FleetVersions:
    """Every tray's versions with its drift from the fleet's usual ones: two queries."""
    vbios: dict[int, set[str]] = defaultdict(set)
    for node_id, version in Gpu.objects.exclude(vbios_version="").values_list(
        "node_id", "vbios_version"
    ):
        vbios[node_id].add(version)
    rows = (
        Node.objects.filter(gone=False)
        .order_by("rack__position", "rack__name", "slot", "hostname")
        .values_list("pk", "hostname", "rack__name", "slot", "clique__name",
                     "clique__cluster_uuid", "clique__clique_id", "driver_version",
                     "imex_version", "agent_version")
    )  # fmt: skip
    trays = []
    for pk, host, rack, slot, name, cluster, clique_id, driver, imex, agent in rows:
        clique = name or (f"{cluster}.{clique_id}" if cluster else "")
        found = {"driver": driver, "imex": imex, "agent": agent,
                 "vbios": ", ".join(sorted(vbios.get(pk, ())))}  # fmt: skip
        trays.append(TrayVersions(host, rack or "", slot, clique, found))
    counts = {c: _ranked(t.versions[c] for t in trays) for c in COMPONENTS}
    usual = {c: ranked[0][0] if ranked else "" for c, ranked in counts.items()}
    for tray in trays:
        tray.drift = [c for c in COMPONENTS if tray.versions[c] and tray.versions[c] != usual[c]]
    by_clique: dict[str, list[str]] = defaultdict(list)
    for tray in trays:
        if tray.clique and tray.versions["driver"]:
            by_clique[tray.clique].append(tray.versions["driver"])
    mixed = {c: _ranked(d) for c, d in sorted(by_clique.items()) if len(set(d)) > 1}
    return FleetVersions(trays, usual, counts, mixed)


def _ranked(values: Iterable[str]) -> list[tuple[str, int]]:
    """Known values with how many have each, the most common first."""
    return Counter(v for v in values if v).most_common()


def driver_mix(node_ids: Iterable[int]) -> list[str]:
    """The NVIDIA drivers these trays run, as "580.82.07 on 3 trays", when they run more
    than one (IMEX would refuse the peers of another version); [] otherwise. One query."""
    ranked = _ranked(
        Node.objects.filter(pk__in=list(node_ids)).values_list("driver_version", flat=True)
    )
    if len(ranked) < 2:
        return []
    return [f"{version} on {n} tray{'s' if n != 1 else ''}" for version, n in ranked]
