"""Reads of ComputeDomains: those scoped to who is asking, what a tray should run, the
placement queue, how long formation and release took, and how much of a quota is used."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.core.paginator import Page, Paginator
from django.db.models import (
    Count,
    F,
    Max,
    Prefetch,
    Q,
    QuerySet,
    Sum,
)

from domains.audit.models import Event
from domains.computedomains.models import (
    LIVE_PHASES,
    NODE_REPORT,
    TERMINAL_PHASES,
    AllocationMode,
    ApprovalState,
    ChannelAllocation,
    ComputeDomain,
    DomainMember,
    Phase,
)
from domains.errors import NotFound
from domains.inventory.models import Clique, Node
from domains.tenancy.models import Namespace
from domains.tenancy.selectors import Viewer, is_admin, is_operator, namespaces_visible_to

# Phases in which members' agents must run IMEX (the desired state is "present").
RUNNING_PHASES = (Phase.FORMING, Phase.READY, Phase.DEGRADED)


def domains_visible_to(user: Viewer) -> QuerySet[ComputeDomain]:
    """Operators see every domain; tenants only those of their namespaces."""
    qs = ComputeDomain.objects.select_related("namespace", "requested_by")
    if is_operator(user):
        return qs
    return qs.filter(namespace__in=namespaces_visible_to(user))


def domains_with_members(user: Viewer, namespace: Namespace) -> QuerySet[ComputeDomain]:
    """A namespace's domains the user may see, members (with tray and clique, clique by
    clique) and the channels they hold (`live_channels`) prefetched."""
    members = DomainMember.objects.select_related("node", "clique__rack").order_by(
        "clique_id", "index"
    )
    held = ChannelAllocation.objects.filter(released_at__isnull=True)
    return (
        domains_visible_to(user)
        .filter(namespace=namespace)
        .prefetch_related(
            Prefetch("members", queryset=members),
            Prefetch("channels", queryset=held, to_attr="live_channels"),
        )
    )


def domain_by_name(
    user: Viewer, namespace: Namespace, name: str, *, members: bool = True
) -> ComputeDomain:
    """The live domain of that name, else the latest ended one (names are reusable once a
    domain has ended, like a deleted Kubernetes object); NotFound when there is none.
    `members=False` for a caller that only hands it to a service (which locks and re-reads
    it): its members are then not read."""
    if members:
        qs = domains_with_members(user, namespace)
    else:
        qs = domains_visible_to(user).filter(namespace=namespace)
    qs = qs.filter(name=name)
    domain = qs.exclude(phase__in=TERMINAL_PHASES).first() or qs.order_by("-created_at").first()
    if domain is None:
        raise NotFound(f"computedomain {name!r} not found in namespace {namespace.name!r}")
    return domain


def approvals_visible_to(user: Viewer) -> QuerySet[ComputeDomain]:
    """Domains waiting for a portal admin's decision, oldest first (none for anyone else),
    with their namespace's quota and their members."""
    if not is_admin(user):
        return ComputeDomain.objects.none()
    members = DomainMember.objects.select_related("node", "clique__rack").order_by(
        "clique_id", "index"
    )
    return (
        domains_visible_to(user)
        .filter(approval_state=ApprovalState.PENDING)
        .select_related("namespace__quota")
        .prefetch_related(Prefetch("members", queryset=members))
        .order_by("created_at")
    )


def events_visible_to(user: Viewer) -> QuerySet[Event]:
    """Operators read the whole audit log; tenants the events of their namespaces."""
    qs = Event.objects.select_related("namespace", "domain", "node", "actor_user")
    if is_operator(user):
        return qs
    return qs.filter(namespace__in=namespaces_visible_to(user))


# --- what a tray should run (the agent's desired-state document is built from these) -------


def desired_member(node: Node) -> DomainMember | None:
    """The membership that holds this tray now, with its domain, or None.

    Active means the member still holds the tray: while the domain forms or runs the agent
    must run IMEX for it; while the domain is Releasing (see `member_should_run`) the agent
    must tear it down and report a clean node, after which the row goes inactive.
    """
    return (
        DomainMember.objects.select_related("domain", "domain__namespace")
        .filter(node=node, active=True)
        .order_by()  # one active member per node; the default ordering would join for nothing
        .first()
    )


def member_should_run(member: DomainMember) -> bool:
    """True while the agent should run IMEX for this member; False: tear down, report clean."""
    return member.active and member.domain.phase in RUNNING_PHASES


def domain_peers(domain: ComputeDomain) -> list[DomainMember]:
    """Every member, clique by clique, in index order inside each: line i of the IMEX nodes
    file of each member of a clique is that clique's peer i."""
    members = domain.members.select_related("node", "clique__rack").defer(NODE_REPORT)
    return list(members.order_by("clique_id", "index"))


def domain_peer_addresses(
    domain: ComputeDomain, *, clique_id: int | None = None
) -> list[tuple[int, str, str]]:
    """(index, IP, hostname) of every active member (of one clique: what that clique's
    nodes files list) in index order, without loading the members and trays as models."""
    members = domain.members.filter(active=True)
    if clique_id is not None:
        members = members.filter(clique_id=clique_id)
    return list(members.order_by("index").values_list("index", "ip_address", "node__hostname"))


def domain_channels(domain: ComputeDomain, *, clique_id: int | None = None) -> list[int]:
    """The IMEX channel numbers the domain's workload may open (in one clique, given one).

    `Single`: the one channel the ledger holds for it in each clique it spans. `All`: every
    channel, 0 included, as NVIDIA's driver gives them — safe without ledger rows because a
    tray serves one domain at a time, and channel numbers mean something only inside one
    IMEX domain.
    """
    if domain.allocation_mode == AllocationMode.ALL:
        return list(range(settings.PORTAL["IMEX_CHANNEL_COUNT"]))
    held = ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True)
    if clique_id is not None:
        held = held.filter(clique_id=clique_id)
    return list(held.order_by("channel").values_list("channel", flat=True))


def queued_domains() -> QuerySet[ComputeDomain]:
    """Admitted domains waiting for capacity, first come first served (a domain that
    follows its workload waits for its pods, not for placement)."""
    return (
        ComputeDomain.objects.filter(phase=Phase.ADMITTED)
        .exclude(num_nodes=0)
        .order_by("admitted_at", "id")
    )


# --- quota usage ------------------------------------------------------------------------------


def domain_phase_counts() -> dict[str, int]:
    """How many domains are in each live phase (the fleet's band: Pending, Degraded …)."""
    rows = (
        ComputeDomain.objects.filter(phase__in=LIVE_PHASES)
        .values_list("phase")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return dict(rows)


# What a namespace holds: `domains`, `nodes` and `gpus` count every live domain (a request
# awaiting approval too: approving it must not take the namespace over its quota); the
# `reserved_*` part of them is what waits for an admin, so pages can say "3 in use, 9
# reserved" rather than "12 in use" while only 3 trays run.
USAGE_KEYS = ("domains", "nodes", "gpus", "reserved_domains", "reserved_nodes", "reserved_gpus")


def empty_usage() -> dict[str, int]:
    return dict.fromkeys(USAGE_KEYS, 0)


def quota_usage(namespace: Namespace) -> dict[str, int]:
    """What the namespace holds now: every live domain counts, queued ones included; a
    domain that follows its workload counts the trays it holds at the moment. Requests
    awaiting approval count as reserved (`reserved_*`, part of the totals)."""
    return usage_by_namespace(namespace.pk).get(namespace.pk, empty_usage())


def usage_by_namespace(namespace_id: int | None = None) -> dict[int, dict[str, int]]:
    """quota_usage for every namespace (or one) in two queries (for lists and metrics)."""
    live = ComputeDomain.objects.filter(phase__in=LIVE_PHASES)
    members = DomainMember.objects.filter(
        active=True, domain__num_nodes=0, domain__phase__in=LIVE_PHASES
    )
    if namespace_id is not None:
        live = live.filter(namespace_id=namespace_id)
        members = members.filter(domain__namespace_id=namespace_id)
    pending = Q(phase=Phase.PENDING)
    rows = live.values("namespace_id").annotate(
        domains=Count("id"),
        nodes=Sum("num_nodes"),
        gpus=Sum(F("num_nodes") * F("gpus_per_node")),
        reserved_domains=Count("id", filter=pending),
        reserved_nodes=Sum("num_nodes", filter=pending),
        reserved_gpus=Sum(F("num_nodes") * F("gpus_per_node"), filter=pending),
    )
    usage = {
        r["namespace_id"]: {
            "domains": r["domains"],
            "nodes": r["nodes"] or 0,
            "gpus": r["gpus"] or 0,
            "reserved_domains": r["reserved_domains"],
            "reserved_nodes": r["reserved_nodes"] or 0,
            "reserved_gpus": r["reserved_gpus"] or 0,
        }
        for r in rows
    }
    joined = members.values("domain__namespace_id").annotate(
        nodes=Count("id"), gpus=Sum("domain__gpus_per_node")
    )
    for r in joined:
        row = usage.setdefault(r["domain__namespace_id"], empty_usage())
        row["nodes"] += r["nodes"]
        row["gpus"] += r["gpus"] or 0
    return usage


# --- the IMEX channel ledger ----------------------------------------------------------------


@dataclass(frozen=True)
class CliqueChannels:
    """Who holds which IMEX channel of one clique now."""

    clique: Clique
    rows: list[ChannelAllocation]  # `Single` domains: one ledger row each
    all_mode: list[ComputeDomain]  # `All` domains: every channel of their trays, no rows


@dataclass(frozen=True)
class LedgerPage:
    """One page of the ledger: the cliques on it and what the whole (filtered) ledger holds."""

    cliques: list[CliqueChannels]
    page: Page[Clique]
    channels_held: int  # `Single` ledger rows over every page
    all_mode_domains: int  # `All` domains over every page


LEDGER_PAGE = 25  # cliques per page: at 1,000 racks the whole ledger is thousands of rows


def channel_ledger(
    *,
    namespace: str = "",
    search: str = "",
    page: int | str | None = 1,
    per_page: int = LEDGER_PAGE,
) -> LedgerPage:
    """The cliques holding a channel, by rack and clique number, a page at a time.

    `namespace` keeps the channels of one tenant's domains; `search` matches a rack name,
    a clique's short name or its label. The query count is the same for one clique as for
    thousands (two to find the cliques, two for the page's holders, one count each).
    """
    held = ChannelAllocation.objects.filter(released_at__isnull=True)
    all_mode = DomainMember.objects.filter(active=True, domain__allocation_mode=AllocationMode.ALL)
    if namespace:
        held = held.filter(domain__namespace__name=namespace)
        all_mode = all_mode.filter(domain__namespace__name=namespace)
    cliques = Clique.objects.filter(
        Q(pk__in=held.values("clique_id")) | Q(pk__in=all_mode.values("clique_id"))
    ).select_related("rack")
    if search:
        term = search.strip()
        match = Q(rack__name__icontains=term) | Q(name__icontains=term)
        uuid, dot, number = term.rpartition(".")
        if dot and number.isdigit():
            match |= Q(cluster_uuid__iexact=uuid, clique_id=int(number))
        elif term.isdigit():
            match |= Q(clique_id=int(term))
        cliques = cliques.filter(match)
    shown = Paginator(cliques.order_by("rack__name", "clique_id", "pk"), per_page).get_page(page)
    on_page = list(shown.object_list)
    rows: dict[int, list[ChannelAllocation]] = defaultdict(list)
    for row in (
        held.filter(clique__in=on_page).select_related("domain__namespace").order_by("channel")
    ):
        rows[row.clique_id].append(row)
    domains: dict[int, dict[int, ComputeDomain]] = defaultdict(dict)
    members = (
        all_mode.filter(clique__in=on_page)
        .select_related("domain__namespace")
        .order_by("domain_id")
    )
    for member in members:
        domains[member.clique_id][member.domain_id] = member.domain
    return LedgerPage(
        cliques=[
            CliqueChannels(c, rows.get(c.pk, []), list(domains.get(c.pk, {}).values()))
            for c in on_page
        ],
        page=shown,
        channels_held=held.count(),
        all_mode_domains=all_mode.values("domain_id").distinct().count(),
    )


# --- a domain that follows its workload: bursts of joins -------------------------------------
# Members learn a changed peer list once per burst of joins and leaves: the nudge waits until
# the membership has been quiet PEERS_QUIET_S (and no longer than PEERS_MAX_S after the
# burst's first change: about the daemons' own once-per-5-s re-resolve). A joining tray
# itself hears at once (it starts its daemon with what it gets).
# 0.4 s: on an idle machine 18 claims allocated at once were all prepared in 1.86 s with it
# against 2.08 s at 0.75 s (bench/dra.py, 2026-11-23), and no burst split. A burst that does
# split on a loaded machine costs one SIGUSR1 per member (Ready ~5 s later), never a restart.
PEERS_QUIET_S = 0.4
PEERS_MAX_S = 5.0


def peers_key(domain_id: int, clique_id: int | None = None) -> str:
    """The cache key that is set while a nudge of the domain's members in the clique is
    pending (each clique's ensemble has its own bursts; None: every member, as a nudge
    queued before cliques had their own)."""
    if clique_id is None:
        return f"computedomains:peers-pending:{domain_id}"
    return f"computedomains:peers-pending:{domain_id}:{clique_id}"


def peers_settling(domain_id: int, clique_id: int | None = None) -> bool:
    """Whether a burst of membership changes is under way in the clique (a nudge of its
    members is pending)."""
    try:
        return bool(cache.get(peers_key(domain_id, clique_id)))
    except Exception:  # Redis away: say nothing; a daemon is re-resolved anyway
        return False


def peers_nudge_wait(
    domain_id: int, *, first: float, now: float | None = None, clique_id: int | None = None
) -> float:
    """How long to put off nudging the members in the clique (0: now): until its membership
    has been quiet PEERS_QUIET_S, and no later than PEERS_MAX_S after `first` (epoch
    seconds)."""
    now = time.time() if now is None else now
    members = DomainMember.objects.filter(domain_id=domain_id)
    if clique_id is not None:
        members = members.filter(clique_id=clique_id)
    changed = members.aggregate(joined=Max("assigned_at"), left=Max("released_at"))
    last = max((at.timestamp() for at in changed.values() if at is not None), default=0.0)
    wait = min(PEERS_QUIET_S - (now - last), PEERS_MAX_S - (now - first))
    return max(wait, 0.05) if wait > 0 else 0.0
