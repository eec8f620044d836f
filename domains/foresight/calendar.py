"""Maintenance windows across racks for a calendar: those overlapping a span of days, each
with the racks its trays are in. Two queries, however many windows and trays."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from domains.inventory.models import MaintenanceWindow
from domains.tenancy.selectors import Viewer


@dataclass(frozen=True)
class CalendarWindow:
    window_id: int
    reason: str
    scope: str  # trays | clique | rack
    target: str
    starts_at: datetime
    ends_at: datetime
    racks: tuple[str, ...]  # the racks of its trays, by name
    trays: int

    def active(self, now: datetime) -> bool:
        return self.starts_at <= now < self.ends_at


def windows_between(user: Viewer, start: datetime, end: datetime) -> list[CalendarWindow]:
    """Windows not cancelled that overlap [start, end), soonest first."""
    if not user.is_authenticated:
        return []
    windows = list(
        MaintenanceWindow.objects.filter(
            cancelled_at__isnull=True, starts_at__lt=end, ends_at__gt=start
        ).order_by("starts_at", "id")
    )
    racks: dict[int, set[str]] = defaultdict(set)
    trays: dict[int, int] = defaultdict(int)
    through = MaintenanceWindow.nodes.through
    for window_id, rack in through.objects.filter(
        maintenancewindow_id__in=[w.pk for w in windows]
    ).values_list("maintenancewindow_id", "node__rack__name"):
        trays[window_id] += 1
        if rack:
            racks[window_id].add(rack)
    return [
        CalendarWindow(
            w.pk,
            w.reason,
            w.scope,
            w.target,
            w.starts_at,
            w.ends_at,
            tuple(sorted(racks[w.pk])),
            trays[w.pk],
        )
        for w in windows
    ]
