"""Reads of ComputeDomains, always scoped to who is asking."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from domains.computedomains.models import (
    NODE_REPORT,
    AllocationMode,
    ChannelAllocation,
    ComputeDomain,
    DomainMember,
    Event,
    Phase,
)
from domains.inventory.models import Node
from domains.tenancy.selectors import is_operator, namespaces_visible_to

# Phases in which members' agents must run IMEX (the desired state is "present").
RUNNING_PHASES = (Phase.FORMING, Phase.READY, Phase.DEGRADED)


def domains_visible_to(user: Any) -> QuerySet[ComputeDomain]:
    """Operators see every domain; tenants only those of their namespaces."""
    qs = ComputeDomain.objects.select_related("namespace", "requested_by")
    if is_operator(user):
        return qs
    return qs.filter(namespace__in=namespaces_visible_to(user))


def events_visible_to(user: Any) -> QuerySet[Event]:
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
    """Every member in index order: line i of each member's IMEX nodes file is peer i."""
    return list(domain.members.select_related("node").defer(NODE_REPORT).order_by("index"))


def domain_peer_addresses(domain: ComputeDomain) -> list[tuple[int, str, str]]:
    """(index, IP, hostname) of every member in index order: what the agents' nodes files
    need, without loading 18 members and their trays as models on every desired-state read."""
    return list(
        domain.members.order_by("index").values_list("index", "ip_address", "node__hostname")
    )


def domain_channels(domain: ComputeDomain) -> list[int]:
    """The IMEX channel numbers the domain's workload may open.

    `Single`: the one channel the ledger holds for it. `All`: every channel but the
    reserved 0 — safe without ledger rows because a tray serves one domain at a time.
    """
    if domain.allocation_mode == AllocationMode.ALL:
        return list(range(1, settings.PORTAL["IMEX_CHANNEL_COUNT"]))
    return list(
        ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True)
        .order_by("channel")
        .values_list("channel", flat=True)
    )


def queued_domains() -> QuerySet[ComputeDomain]:
    """Admitted domains waiting for capacity, first come first served."""
    return ComputeDomain.objects.filter(phase=Phase.ADMITTED).order_by("admitted_at", "id")
