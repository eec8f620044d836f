"""Every write to ComputeDomains goes through one of these services (STYLE.md).

Each is keyword-only, runs in one transaction, records an Event and announces the change
after commit. Pages, API actions, Kubernetes sync and tasks all call these; none of them
writes through the ORM itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from domains.agents.report import AgentReport
from domains.computedomains.events import Actor
from domains.computedomains.models import ComputeDomain, DomainSource
from domains.inventory.models import Node
from domains.tenancy.models import Namespace


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


@dataclass(frozen=True)
class DryRunResult:
    """The would-be outcome of a request, creating nothing."""

    placeable: bool  # fits in the fabric now
    quota_ok: bool
    needs_approval: bool
    message: str  # one human sentence: where it lands, or why it can't
    reasons: list[str] = field(default_factory=list)
    quota_problems: list[str] = field(default_factory=list)
    clique: str = ""  # label of the chosen clique
    clique_name: str = ""
    rack: str = ""
    nodes: list[str] = field(default_factory=list)  # hostnames in index order
    node_ids: list[int] = field(default_factory=list)
    quota_impact: dict[str, dict[str, int | None]] = field(default_factory=dict)
    # e.g. {"gpus": {"used": 8, "requested": 8, "limit": 32}, ...}


def domain_request(
    *,
    actor: Actor,
    namespace: Namespace,
    spec: DomainSpec,
    source: str = DomainSource.PORTAL,
) -> ComputeDomain:
    """Validate, admit against quota (namespace row locked) and queue for placement."""
    raise NotImplementedError


def domain_dry_run(*, namespace: Namespace, spec: DomainSpec) -> DryRunResult:
    """Validate and say where it would land (or why not) without creating anything."""
    raise NotImplementedError


def domain_approve(*, actor: Actor, domain: ComputeDomain) -> ComputeDomain:
    raise NotImplementedError


def domain_deny(*, actor: Actor, domain: ComputeDomain, reason: str = "") -> ComputeDomain:
    raise NotImplementedError


def domain_release(*, actor: Actor, domain: ComputeDomain, reason: str = "") -> ComputeDomain:
    """Idempotent: members' desired state becomes absent; Released once all are clean."""
    raise NotImplementedError


def domain_extend_lease(*, actor: Actor, domain: ComputeDomain, by: timedelta) -> ComputeDomain:
    raise NotImplementedError


def domain_member_report(*, node: Node, report: AgentReport) -> None:
    """Fold one agent report into its member's state and the domain's phase."""
    raise NotImplementedError
