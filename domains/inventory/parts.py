"""What a rack elevation draws besides its compute trays: the NVLink switch trays and power
shelves recorded for each rack, and the maintenance windows on its trays. Three queries for
any number of racks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from domains.inventory.models import MaintenanceWindow, PowerShelf, SwitchTray

SWITCH = "switch"
POWER = "power"


@dataclass(frozen=True, slots=True)
class Part:
    """A switch tray (`number` is its slot) or power shelf (its position, top to bottom)."""

    kind: str  # SWITCH or POWER
    number: int
    name: str
    state: str  # PartState
    reason: str
    watts: int = 0


@dataclass(frozen=True, slots=True)
class WindowMark:
    """One maintenance window over some trays of one rack."""

    window_id: int
    reason: str
    starts_at: datetime
    ends_at: datetime
    node_ids: frozenset[int]

    def active(self, now: datetime) -> bool:
        return self.starts_at <= now < self.ends_at


def parts_of_racks(rack_ids: Iterable[int]) -> dict[int, list[Part]]:
    """rack id → its switch trays then power shelves, each by number."""
    ids = list(rack_ids)
    parts: dict[int, list[Part]] = defaultdict(list)
    switches = SwitchTray.objects.filter(rack_id__in=ids).order_by("rack_id", "slot")
    for rack_id, slot, name, state, reason in switches.values_list(
        "rack_id", "slot", "name", "state", "state_reason"
    ):
        parts[rack_id].append(Part(SWITCH, slot, name, state, reason))
    shelves = PowerShelf.objects.filter(rack_id__in=ids).order_by("rack_id", "position")
    for rack_id, position, name, state, reason, psus, watts in shelves.values_list(
        "rack_id", "position", "name", "state", "state_reason", "psu_count", "psu_watts"
    ):
        parts[rack_id].append(Part(POWER, position, name, state, reason, psus * watts))
    return dict(parts)


def windows_on_racks(rack_ids: Iterable[int], now: datetime) -> dict[int, list[WindowMark]]:
    """rack id → the windows not cancelled and not over on its trays, soonest first."""
    rows = (
        MaintenanceWindow.nodes.through.objects.filter(
            node__rack_id__in=list(rack_ids),
            maintenancewindow__cancelled_at__isnull=True,
            maintenancewindow__ends_at__gt=now,
        )
        .order_by("maintenancewindow__starts_at", "maintenancewindow_id")
        .values_list(
            "node__rack_id",
            "maintenancewindow_id",
            "maintenancewindow__reason",
            "maintenancewindow__starts_at",
            "maintenancewindow__ends_at",
            "node_id",
        )
    )
    found: dict[tuple[int, int], tuple[str, datetime, datetime, set[int]]] = {}
    for rack_id, window_id, reason, starts, ends, node_id in rows:
        found.setdefault((rack_id, window_id), (reason, starts, ends, set()))[3].add(node_id)
    marks: dict[int, list[WindowMark]] = defaultdict(list)
    for (rack_id, window_id), (reason, starts, ends, nodes) in found.items():
        marks[rack_id].append(WindowMark(window_id, reason, starts, ends, frozenset(nodes)))
    return dict(marks)
