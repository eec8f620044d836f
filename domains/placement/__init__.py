"""Placement of ComputeDomains onto NVLink cliques: pure functions over a topology snapshot.

`place()`, `clique_summaries()` and the dataclasses import no ORM; `topology_snapshot()`
(the selector that builds the snapshot from the database) lives in `selectors` and is
imported lazily so the pure part stays usable without Django apps loaded.
"""

from __future__ import annotations

from domains.placement.algorithm import clique_summaries, free_runs, place, place_first_fit
from domains.placement.model import (
    CliqueSummary,
    CliqueView,
    Placement,
    PlacementRequest,
    Rejection,
    Topology,
    Tray,
    TrayStatus,
)


def topology_snapshot() -> Topology:
    """The fabric as plain values (see domains.placement.selectors.topology_snapshot)."""
    from domains.placement.selectors import topology_snapshot as snapshot

    return snapshot()


__all__ = [
    "CliqueSummary",
    "CliqueView",
    "Placement",
    "PlacementRequest",
    "Rejection",
    "Topology",
    "Tray",
    "TrayStatus",
    "clique_summaries",
    "free_runs",
    "place",
    "place_first_fit",
    "topology_snapshot",
]
