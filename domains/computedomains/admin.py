"""Domains, members, the channel ledger and trays in the Django admin: read-only (their
phase and states change only through the services). Releasing goes through
`domain_release`; the tray actions go through `trays.tray_act`, the same rules as the
operator's pages and the API (nothing that would change nothing; a tray whose domain is
running is drained before it is marked down)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from domains.admin import ReadOnlyAdmin, ReadOnlyInline
from domains.audit.events import Actor
from domains.computedomains.models import ChannelAllocation, ComputeDomain, DomainMember
from domains.computedomains.services import domain_release
from domains.computedomains.trays import TRAY_ACTIONS, TrayAction, tray_act
from domains.errors import DomainError
from domains.inventory.admin import GpuInline, NodeConditionInline
from domains.inventory.models import Node

REASON = "from the Django admin"


class DomainMemberInline(ReadOnlyInline[DomainMember]):
    model = DomainMember
    fields = ["index", "node", "state", "active", "step", "daemon_state", "message"]


@admin.register(ComputeDomain)
class ComputeDomainAdmin(ReadOnlyAdmin[ComputeDomain]):
    list_display = ["name", "namespace", "num_nodes", "allocation_mode", "phase", "created_at"]
    list_filter = ["phase", "allocation_mode", "namespace"]
    list_select_related = ["namespace"]
    search_fields = ["name", "uid"]
    inlines = [DomainMemberInline]
    actions = ["release"]

    @admin.action(description="Release the selected domains", permissions=["view"])
    def release(self, request: HttpRequest, queryset: QuerySet[ComputeDomain]) -> None:
        if not request.user.is_authenticated:
            return
        actor = Actor.for_user(request.user)
        asked = 0
        for domain in queryset.select_related("namespace"):
            try:
                domain_release(actor=actor, domain=domain, reason=REASON)
            except DomainError as exc:
                messages.error(request, f"{domain}: {exc.message}")
            else:
                asked += 1
        messages.success(request, f"Asked {asked} domain(s) to release.")


@admin.register(DomainMember)
class DomainMemberAdmin(ReadOnlyAdmin[DomainMember]):
    list_display = ["domain", "index", "node", "state", "active"]
    list_filter = ["state", "active"]
    list_select_related = ["domain__namespace", "node"]


@admin.register(ChannelAllocation)
class ChannelAllocationAdmin(ReadOnlyAdmin[ChannelAllocation]):
    list_display = ["clique", "channel", "domain", "allocated_at", "released_at"]
    list_select_related = ["clique", "domain__namespace"]


def _tray_action(
    chosen: TrayAction,
) -> Callable[[NodeAdmin, HttpRequest, QuerySet[Node]], None]:
    @admin.action(description=f"{chosen.title}: {chosen.explanation}", permissions=["view"])
    def action(model_admin: NodeAdmin, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        if not request.user.is_authenticated:
            return
        actor = Actor.for_user(request.user)
        done = []
        for node in queryset:
            try:
                tray_act(actor=actor, node=node, action=chosen.key, reason=REASON)
            except DomainError as exc:
                messages.error(request, exc.message)
            else:
                done.append(node.hostname)
        if done:
            messages.success(request, f"{chosen.title} done: {', '.join(done)}.")

    action.__name__ = chosen.service.__name__  # node_cordon, node_mark_down …
    return action


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin[Node]):
    """Compute trays: what the state machine, the agent or Kubernetes says, read-only."""

    list_display = [
        "hostname",
        "management_ip",
        "rack",
        "slot",
        "clique",
        "state",
        "last_heartbeat",
    ]
    list_filter = ["state", "rack", "source"]
    list_select_related = ["rack", "clique"]
    search_fields = ["hostname", "management_ip"]
    exclude = ["agent_token_hash"]
    inlines = [NodeConditionInline, GpuInline]
    actions = [_tray_action(chosen) for chosen in TRAY_ACTIONS.values()]
