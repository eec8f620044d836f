"""The placement vocabulary: plain frozen dataclasses, no ORM.

`topology_snapshot()` (domains.computedomains.fabric) builds a `Topology` from the database
in a constant number of queries; everything else in this package works on these values
only, so it can be unit-tested and benchmarked without a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class TrayStatus:
    """Why a tray is or is not available to a new domain (one word each)."""

    FREE = "free"  # ready, uncordoned, fresh heartbeat, in no live domain
    IN_USE = "in_use"  # a member of a live domain (until its agent confirmed a clean node)
    CORDONED = "cordoned"  # (in use or not: an operator's flag is told before the use)
    DRAINING = "draining"
    DOWN = "down"
    UNKNOWN = "unknown"  # agent never joined, or gone from Kubernetes
    STALE = "stale"  # its agent silent: no heartbeat within HEARTBEAT_STALE_AFTER
    NO_ADDRESS = "no_address"  # no management IP known: peers could not reach its daemon
    BLOCKED = "blocked"  # its agent reports a blocking condition (NVML, host IMEX service…)
    FOREIGN = "foreign"  # its clique is another rack's: only an operator moves a tray so

    LABELS = {
        IN_USE: "in use",
        CORDONED: "cordoned",
        DRAINING: "draining",
        DOWN: "down",
        UNKNOWN: "not ready",
        STALE: "agent silent",
        NO_ADDRESS: "without a management IP",
        BLOCKED: "held back by a tray condition",
        FOREIGN: "in a clique of another rack",
    }


@dataclass(frozen=True, slots=True)
class Tray:
    """One compute tray as placement sees it."""

    node_id: int
    hostname: str
    slot: int  # position in the rack; contiguity of free slots is what best fit preserves
    ip: str
    gpu_count: int
    status: str = TrayStatus.FREE
    # Maintenance windows (start, end), in seconds since the epoch, not yet over.
    maintenance: tuple[tuple[float, float], ...] = ()
    held: bool = False  # a live domain holds it (whatever `status` tells first)

    @property
    def free(self) -> bool:
        return self.status == TrayStatus.FREE

    def clear_of_maintenance(self, at: float | None, until: float | None) -> bool:
        """No window overlaps [at, until): the time a domain placed at `at` would hold it.
        Without a time (None) no window is checked."""
        if at is None or until is None:
            return True
        return all(start >= until or end <= at for start, end in self.maintenance)

    def fits(self, request: PlacementRequest) -> bool:
        """Free now, big enough, and clear of maintenance for the request's lease."""
        return (
            self.free
            and self.gpu_count >= request.gpus_per_node
            and self.clear_of_maintenance(request.at, request.until)
        )


@dataclass(frozen=True, slots=True)
class CliqueView:
    """One NVLink clique with its trays in slot order."""

    clique_id: int
    label: str  # "<cluster_uuid>.<clique_id>"
    name: str  # operator's short name (may equal the label)
    rack: str  # rack name, "" when the clique spans no known rack
    trays: tuple[Tray, ...]

    @property
    def size(self) -> int:
        return len(self.trays)

    def free_trays(self, gpus_per_node: int = 0) -> list[Tray]:
        return [t for t in self.trays if t.free and t.gpu_count >= gpus_per_node]

    def trays_for(self, request: PlacementRequest) -> list[Tray]:
        """The trays a request could take: free, big enough, no maintenance in its lease."""
        return [t for t in self.trays if t.fits(request)]


@dataclass(frozen=True, slots=True)
class Topology:
    """The whole fabric at one instant, cliques in a stable order (rack position, id)."""

    cliques: tuple[CliqueView, ...]

    def tray_count(self) -> int:
        return sum(c.size for c in self.cliques)


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """What placement needs to know about a domain."""

    num_nodes: int
    gpus_per_node: int = 0  # 0: any tray will do
    constraint: str = "any"  # any | clique | rack
    target: str = ""  # clique label or name / rack name
    # When the domain would be placed and until when it would hold its trays (seconds since
    # the epoch; `until` may be inf for a domain without a lease). Trays with a maintenance
    # window inside that time are not taken. None: windows are not considered.
    at: float | None = None
    until: float | None = None
    # How many cliques (or racks, one clique in each) the domain asks to span; 0: one clique
    # when the request fits the largest allowed, else the fewest that hold it (`plan()`).
    cliques: int = 0
    racks: int = 0

    @property
    def spread(self) -> int:
        """The count of cliques or racks asked for (0: placement decides)."""
        return self.cliques or self.racks


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a domain lands: one clique and trays in index order (index = position)."""

    clique_id: int
    clique_label: str
    clique_name: str
    rack: str
    trays: tuple[Tray, ...]
    free_before: int  # free trays the clique had

    @property
    def node_ids(self) -> list[int]:
        return [t.node_id for t in self.trays]

    @property
    def hostnames(self) -> list[str]:
        return [t.hostname for t in self.trays]

    def describe(self) -> str:
        where = f"rack {self.rack} clique {self.clique_name}" if self.rack else self.clique_name
        return f"{len(self.trays)} trays in {where} ({self.free_before} free before)"


@dataclass(frozen=True, slots=True)
class SpanningPlacement:
    """A domain over several cliques: one `Placement` per clique (each its own IMEX
    ensemble, indexes counted inside it), in topology order, and why these, in words."""

    parts: tuple[Placement, ...]
    reasons: tuple[str, ...]  # the headline first, then one line per clique

    @property
    def trays(self) -> tuple[Tray, ...]:
        return tuple(t for part in self.parts for t in part.trays)

    @property
    def node_ids(self) -> list[int]:
        return [t.node_id for t in self.trays]

    @property
    def hostnames(self) -> list[str]:
        return [t.hostname for t in self.trays]

    @property
    def racks(self) -> list[str]:
        """The racks it spans, in topology order, each once."""
        return list(dict.fromkeys(part.rack for part in self.parts))

    def describe(self) -> str:
        racks = self.racks
        over = f"{len(racks)} rack{'s' if len(racks) != 1 else ''}" if all(racks) else "the fabric"
        return f"{len(self.trays)} trays in {len(self.parts)} cliques over {over}"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Nothing fits now; `reasons[0]` is the headline, the rest are details."""

    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def message(self) -> str:
        return self.reasons[0] if self.reasons else "no placement"


@dataclass(frozen=True, slots=True)
class CliqueSummary:
    """Occupancy and fragmentation of one clique, for the topology view."""

    clique_id: int
    label: str
    name: str
    rack: str
    total: int
    free: int
    in_use: int
    unavailable: int  # cordoned, draining, down, unknown or silent
    largest_free_block: int  # longest run of free trays in consecutive slots
    stranded: int  # free trays that no allowed request can use (clique below the minimum)
    fragmented: int  # free trays outside the largest free block
