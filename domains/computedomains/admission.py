"""Admission: turning a `DomainSpec` into a valid, quota-checked request.

Validation raises `InvalidInput` naming the field, so the form and the API show the error
next to the input at fault. `check` reads everything a request is admitted on, once, for
both a request and its dry run: the request enforces the answer (`Admission.enforce`), the
dry run shows it. Quota arithmetic is kept apart from locking: the caller
(`domain_request`) locks the namespace row first, so two concurrent requests can never both
see the last unit of quota as free.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import Count, Max, Q, QuerySet
from django.utils import timezone

from domains.computedomains.models import (
    LIVE_PHASES,
    AllocationMode,
    ComputeDomain,
    PlacementConstraint,
    ReplacePolicy,
)
from domains.computedomains.selectors import quota_usage
from domains.computedomains.specs import DomainSpec
from domains.errors import InvalidInput, NameTaken, QuotaExceeded
from domains.inventory.models import Clique, Node
from domains.placement.model import PlacementRequest
from domains.tenancy.models import Namespace, Quota
from domains.validators import validate_dns1123_label

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_LABELS = 32


@dataclass(frozen=True)
class CleanSpec:
    """A validated spec with every default filled in: what the domain row will hold."""

    name: str
    num_nodes: int
    allocation_mode: str
    resource_claim_template: str
    gpus_per_node: int
    placement_constraint: str
    placement_target: str
    lifetime: timedelta
    labels: dict[str, str]
    replace_policy: str = ReplacePolicy.AUTO
    span_cliques: int = 0
    span_racks: int = 0

    @property
    def gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def placement_request(self, *, at: datetime | None = None) -> PlacementRequest:
        """Placed `at` (default: now) and held for the lifetime asked for."""
        at = at or timezone.now()
        return PlacementRequest(
            num_nodes=self.num_nodes,
            gpus_per_node=self.gpus_per_node,
            constraint=self.placement_constraint,
            target=self.placement_target,
            at=at.timestamp(),
            until=lease_end(at, self.lifetime),
            cliques=self.span_cliques,
            racks=self.span_racks,
        )


def lease_end(at: datetime, lifetime: timedelta | None) -> float:
    """When a domain placed `at` would let go of its trays, in placement's clock (seconds
    since the epoch): its lease runs for `lifetime` from Ready, which follows placement
    within the formation deadline; without a lifetime, never."""
    if lifetime is None:
        return math.inf
    return (at + lifetime + settings.PORTAL["FORMATION_DEADLINE"]).timestamp()


def smallest_request() -> int:
    """The smallest domain a tenant may request (trays); fewer free trays in a clique are
    stranded: nobody can use them."""
    return int(settings.PORTAL["SMALLEST_REQUEST_NODES"])


def quota_of(namespace: Namespace) -> Quota:
    """The namespace's quota; an unsaved all-unlimited one when none was ever set."""
    return Quota.objects.filter(namespace=namespace).first() or Quota(namespace=namespace)


def clean_spec(*, namespace: Namespace, spec: DomainSpec, quota: Quota | None = None) -> CleanSpec:
    """Validate every field (first error wins) and fill defaults. Reads, never writes; the
    namespace's quota (its lifetime limit) is read unless the caller has it already."""
    if not namespace.active:
        raise InvalidInput(f"namespace {namespace.name} is no longer active", field="namespace")
    name = _clean_name(namespace, spec.name)
    constraint, target, fabric = _clean_placement(spec)
    num_nodes = _clean_int(spec.num_nodes, "num_nodes")
    _check_size(num_nodes, constraint, fabric)
    span_cliques, span_racks = _clean_span(spec, num_nodes, constraint, fabric)
    max_gpus = fabric.max_gpus
    gpus = max_gpus
    if spec.gpus_per_node is not None:
        gpus = _clean_int(spec.gpus_per_node, "gpus_per_node")
    if not 1 <= gpus <= max_gpus:
        raise InvalidInput(f"must be between 1 and {max_gpus}", field="gpus_per_node")
    if spec.allocation_mode not in AllocationMode.values:
        raise InvalidInput("must be Single or All", field="allocation_mode")
    if spec.replace_policy not in ReplacePolicy.values:
        raise InvalidInput("must be auto or manual", field="replace_policy")
    template = spec.resource_claim_template or f"{name}-channel"
    if len(template) > 253 or not DNS1123_SUBDOMAIN.match(template):
        raise InvalidInput(
            "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')",
            field="resource_claim_template",
        )
    return CleanSpec(
        name=name,
        num_nodes=num_nodes,
        allocation_mode=spec.allocation_mode,
        resource_claim_template=template,
        gpus_per_node=gpus,
        placement_constraint=constraint,
        placement_target=target,
        lifetime=_clean_lifetime(spec.lifetime, quota_of(namespace) if quota is None else quota),
        labels=_clean_labels(spec.labels),
        replace_policy=spec.replace_policy,
        span_cliques=span_cliques,
        span_racks=span_racks,
    )


@dataclass(frozen=True)
class Admission:
    """What admission says of a request, read once (`check`); nothing is written."""

    namespace: Namespace
    clean: CleanSpec
    quota: Quota
    usage: dict[str, int]
    # A limit on one domain (size, lifetime) it breaks, naming the field; None: within them.
    over_domain_limit: QuotaExceeded | None
    # Every namespace-wide limit (GPUs, trays, domains) it would break, in words.
    over_namespace_quota: list[str]
    needs_approval: bool

    @property
    def quota_problems(self) -> list[str]:
        """Every quota problem in words, the one-domain limit first (the dry run's list)."""
        first = [self.over_domain_limit.message] if self.over_domain_limit else []
        return first + self.over_namespace_quota

    @property
    def quota_impact(self) -> dict[str, dict[str, int | None]]:
        """Used / requested / limit for GPUs, trays and domains (the form's quota bar)."""
        return quota_impact(quota=self.quota, usage=self.usage, spec=self.clean)

    def enforce(self) -> None:
        """Refuse a request over quota: QuotaExceeded naming the field of a one-domain
        limit, else listing every namespace-wide limit it would break."""
        if self.over_domain_limit is not None:
            raise self.over_domain_limit
        if self.over_namespace_quota:
            problems = self.over_namespace_quota
            raise QuotaExceeded(
                f"over the quota of namespace {self.namespace.name}: " + "; ".join(problems),
                details={"problems": problems},
            )


def check(*, namespace: Namespace, spec: DomainSpec, requested_by: User | None = None) -> Admission:
    """Validate the spec (InvalidInput / NameTaken naming the field) and weigh it against
    the namespace's quota and approval threshold. A request enforces the answer inside the
    transaction that locked the namespace row; a dry run shows it."""
    quota = quota_of(namespace)
    clean = clean_spec(namespace=namespace, spec=spec, quota=quota)
    usage = quota_usage(namespace)
    try:
        per_domain_limits(quota=quota, spec=clean)
    except QuotaExceeded as exc:
        over_domain_limit: QuotaExceeded | None = exc
    else:
        over_domain_limit = None
    return Admission(
        namespace=namespace,
        clean=clean,
        quota=quota,
        usage=usage,
        over_domain_limit=over_domain_limit,
        over_namespace_quota=quota_problems(quota=quota, usage=usage, spec=clean),
        needs_approval=needs_approval(quota=quota, spec=clean, requested_by=requested_by),
    )


def per_domain_limits(*, quota: Quota, spec: CleanSpec) -> None:
    """Limits on one domain (size, lifetime): QuotaExceeded naming the field."""
    if quota.max_nodes_per_domain is not None and spec.num_nodes > quota.max_nodes_per_domain:
        raise QuotaExceeded(
            f"at most {quota.max_nodes_per_domain} trays per domain in namespace "
            f"{quota.namespace.name}",
            field="num_nodes",
        )
    if quota.max_lifetime is not None and spec.lifetime > quota.max_lifetime:
        raise QuotaExceeded(
            f"at most {_human(quota.max_lifetime)} in namespace {quota.namespace.name}",
            field="lifetime",
        )


def quota_impact(
    *, quota: Quota, usage: dict[str, int], spec: CleanSpec
) -> dict[str, dict[str, int | None]]:
    """Used / requested / limit for GPUs, trays and domains (the form's quota bar); `used`
    includes `reserved`, what requests awaiting an admin's approval hold."""
    requested = {"gpus": spec.gpus, "nodes": spec.num_nodes, "domains": 1}
    limits = {"gpus": quota.max_gpus, "nodes": quota.max_nodes, "domains": quota.max_domains}
    return {
        what: {
            "used": usage[what],
            "reserved": usage.get(f"reserved_{what}", 0),
            "requested": requested[what],
            "limit": limits[what],
        }
        for what in ("gpus", "nodes", "domains")
    }


def quota_problems(*, quota: Quota, usage: dict[str, int], spec: CleanSpec) -> list[str]:
    """Human sentences for every namespace-wide limit this request would break."""
    problems = []
    for what, row in quota_impact(quota=quota, usage=usage, spec=spec).items():
        limit = row["limit"]
        used, requested = row["used"] or 0, row["requested"] or 0
        reserved = row["reserved"] or 0
        if limit is not None and used + requested > limit:
            unit = {"gpus": "GPUs", "nodes": "trays", "domains": "domains"}[what]
            held = f"{used - reserved} in use"
            if reserved:
                held += f" + {reserved} reserved (awaiting approval)"
            problems.append(f"{unit}: {held} + {requested} requested exceeds the quota of {limit}")
    return problems


def needs_approval(*, quota: Quota, spec: CleanSpec, requested_by: User | None = None) -> bool:
    """Above the namespace's threshold an admin approves; a portal admin's own requests
    are approved by asking."""
    if requested_by is not None and requested_by.is_superuser:
        return False
    threshold = quota.approval_above_nodes
    return threshold is not None and spec.num_nodes > threshold


# --- field cleaners ---------------------------------------------------------------------------


def _clean_name(namespace: Namespace, name: Any) -> str:
    if not isinstance(name, str):
        raise InvalidInput("must be a string", field="name")
    try:
        validate_dns1123_label(name)
    except ValidationError as exc:
        raise InvalidInput(exc.messages[0], field="name")
    live = ComputeDomain.objects.filter(namespace=namespace, name=name, phase__in=LIVE_PHASES)
    if live.exists():
        raise NameTaken(
            f"a live domain named {name!r} already exists in {namespace.name}", field="name"
        )
    return name


def _clean_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput("must be a whole number", field=field)
    return value


@dataclass(frozen=True)
class _Allowed:
    """The cliques a placement constraint allows: their sizes, racks and largest tray."""

    sizes: list[int]
    racks: int  # racks with at least one of them
    max_gpus: int

    @property
    def largest(self) -> int:
        return max(self.sizes, default=0)


def _check_size(num_nodes: int, constraint: str, fabric: _Allowed) -> None:
    """0 (the domain follows its workload, NVIDIA's default: nothing is placed up front),
    or what the allowed cliques hold: one clique's trays for a domain kept to one clique,
    every allowed clique's together for one that may span them."""
    largest = fabric.largest
    smallest = min(smallest_request(), largest)
    most = largest if constraint == PlacementConstraint.CLIQUE else sum(fabric.sizes)
    if num_nodes == 0 or smallest <= num_nodes <= most:
        return
    allowed = " allowed by the placement constraint" if constraint != "any" else ""
    held = (
        f"the largest clique{allowed}"
        if most == largest
        else f"the trays of every clique{allowed} together"
    )
    raise InvalidInput(
        f"must be 0 (follow the workload) or between {smallest} and {most} ({held})",
        field="num_nodes",
    )


def _clean_span(
    spec: DomainSpec, num_nodes: int, constraint: str, fabric: _Allowed
) -> tuple[int, int]:
    """(span_cliques, span_racks): at most one of them, 0 or up to what the constraint
    allows, and only for a placed domain (one that follows its workload places nothing)."""
    cliques = _clean_int(spec.span_cliques, "span_cliques")
    racks = _clean_int(spec.span_racks, "span_racks")
    for field, count, have, unit in (
        ("span_cliques", cliques, len(fabric.sizes), "cliques"),
        ("span_racks", racks, fabric.racks, "racks"),
    ):
        if not count:
            continue
        if count < 0:
            raise InvalidInput("must be 0 (placement decides) or more", field=field)
        if cliques and racks:
            raise InvalidInput("ask for a number of racks or of cliques, not both", field=field)
        if num_nodes == 0:
            raise InvalidInput(
                "only a placed domain (numNodes above 0) spans a number of " + unit, field=field
            )
        if count > 1 and constraint == PlacementConstraint.CLIQUE:
            raise InvalidInput("a domain kept to one clique spans no more", field=field)
        if count > min(have, num_nodes):
            raise InvalidInput(
                f"must be at most {min(have, num_nodes)} (the {unit} allowed, and one tray "
                "in each at least)",
                field=field,
            )
    return cliques, racks


def _clean_placement(spec: DomainSpec) -> tuple[str, str, _Allowed]:
    """(constraint, target, the cliques it allows) — one query each."""
    constraint, target = spec.placement_constraint or "any", (spec.placement_target or "").strip()
    if constraint not in PlacementConstraint.values:
        raise InvalidInput("must be one of any, clique, rack", field="placement_constraint")
    trays = Node.objects.filter(clique__isnull=False, gone=False)
    if constraint == PlacementConstraint.ANY:
        target = ""
    elif not target:
        raise InvalidInput(f"name the {constraint} to place in", field="placement_target")
    elif constraint == PlacementConstraint.CLIQUE:
        trays = trays.filter(clique__in=Clique.objects.filter(_clique_q(target)))
    else:
        trays = trays.filter(clique__rack__name=target)
    rows = list(
        trays.values("clique_id", "clique__rack_id").annotate(n=Count("id"), g=Max("gpu_count"))
    )
    fabric = _Allowed(
        sizes=[row["n"] for row in rows],
        racks=len({row["clique__rack_id"] for row in rows if row["clique__rack_id"]}),
        max_gpus=max((row["g"] for row in rows), default=0),
    )
    if not fabric.largest:
        if constraint == PlacementConstraint.ANY:
            raise InvalidInput("the fabric has no NVLink clique with trays yet", field="num_nodes")
        raise InvalidInput(f"no {constraint} named {target!r} with trays", field="placement_target")
    return constraint, target, fabric


def cliques_named(target: str) -> QuerySet[Clique]:
    """The clique a placement constraint names (by operator name or label)."""
    return Clique.objects.filter(_clique_q(target))


def _clique_q(target: str) -> Q:
    """A clique by operator name or by its `<cluster_uuid>.<clique_id>` label."""
    q = Q(name=target)
    uuid_part, _, id_part = target.rpartition(".")
    if uuid_part and (id_part.isascii() and id_part.isdigit()):
        q |= Q(cluster_uuid=uuid_part, clique_id=int(id_part))
    return q


def _clean_lifetime(lifetime: Any, quota: Quota) -> timedelta:
    if lifetime is None:
        default: timedelta = settings.PORTAL["DEFAULT_LIFETIME"]
        return min(default, quota.max_lifetime) if quota.max_lifetime else default
    if not isinstance(lifetime, timedelta):
        raise InvalidInput("must be a duration", field="lifetime")
    if lifetime <= timedelta(0):
        raise InvalidInput("must be positive", field="lifetime")
    return lifetime


def _clean_labels(labels: Any) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        raise InvalidInput(f"must be a map of at most {MAX_LABELS} entries", field="labels")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInput("keys and values must be strings", field="labels")
        if not key or len(key) > 63 or len(value) > 63:
            raise InvalidInput(
                f"label {key!r}: keys 1-63 characters, values at most 63", field="labels"
            )
    return dict(labels)


def _human(delta: timedelta) -> str:
    hours, rem = divmod(int(delta.total_seconds()), 3600)
    if rem == 0 and hours:
        return f"{hours} h"
    return f"{int(delta.total_seconds()) // 60} min"
