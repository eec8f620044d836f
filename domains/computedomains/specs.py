"""What a tenant asks for and what a dry run answers: plain values shared by the services,
the web forms, the API serializers and Kubernetes adoption."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True)
class DomainSpec:
    """What a tenant asks for. Validated by `domain_request` / `domain_dry_run`."""

    name: str
    num_nodes: int
    allocation_mode: str = "Single"
    resource_claim_template: str = ""  # default: "<name>-channel"
    gpus_per_node: int | None = None  # default: the trays' GPU count (4 on GB200)
    placement_constraint: str = "any"  # any | clique | rack
    placement_target: str = ""  # clique label/name or rack name
    lifetime: timedelta | None = None  # default: settings.PORTAL["DEFAULT_LIFETIME"]
    labels: dict[str, str] = field(default_factory=dict)
    # A placed domain's lost tray: "auto" (a free tray of its clique takes its place) or
    # "manual" (an operator picks the tray, or none).
    replace_policy: str = "auto"
    # A placed domain over several NVLink cliques: how many cliques, or racks (one clique
    # in each); 0: placement decides (one clique when it fits, else the fewest that hold it).
    span_cliques: int = 0
    span_racks: int = 0


@dataclass(frozen=True)
class DryRunResult:
    """The would-be outcome of a request, creating nothing."""

    placeable: bool  # fits in the fabric now
    quota_ok: bool
    needs_approval: bool
    message: str  # one human sentence: where it lands, or why it can't
    reasons: list[str] = field(default_factory=list)
    quota_problems: list[str] = field(default_factory=list)
    clique: str = ""  # label of the chosen clique ("" when it spans several)
    clique_name: str = ""
    rack: str = ""  # the rack of one clique ("" when it spans several: see `racks`)
    racks: list[str] = field(default_factory=list)  # every rack it would use, in order
    cliques: int = 0  # how many cliques (IMEX ensembles) it would use
    nodes: list[str] = field(default_factory=list)  # hostnames in index order
    node_ids: list[int] = field(default_factory=list)
    quota_impact: dict[str, dict[str, int | None]] = field(default_factory=dict)
    # e.g. {"gpus": {"used": 8, "requested": 8, "limit": 32}, ...}
    # Maintenance windows the lease would reach into: their trays are left out.
    maintenance: list[str] = field(default_factory=list)
    # When it would be placed if requested now (the queue simulated forward), or why no
    # time can be given (reason NeverFits / NoLeaseEnds); FitsNow when it fits at once.
    estimated_placement_at: datetime | None = None
    estimate_reason: str = ""
    estimate_message: str = ""
    # The NVIDIA drivers of the trays it would get, when they differ ("580.82.07 on 3
    # trays"): IMEX refuses peers of another driver version, so it would not form.
    mixed_drivers: list[str] = field(default_factory=list)
