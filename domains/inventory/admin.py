"""Racks, cliques and trays in the Django admin. A tray's state and what its agent reported
are read-only here; cordon, drain, uncordon and mark down are actions that call the same
services as the operator pages (events, announcements, the lifecycle's reaction)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from domains.audit.admin import ReadOnlyAdmin, ReadOnlyInline
from domains.audit.events import Actor
from domains.errors import DomainError
from domains.inventory.models import Clique, Gpu, Node, NodeCondition, PowerShelf, Rack, SwitchTray
from domains.inventory.services import node_cordon, node_drain, node_mark_down, node_uncordon


class GpuInline(ReadOnlyInline[Gpu]):
    model = Gpu


class NodeConditionInline(ReadOnlyInline[NodeCondition]):
    """What the tray's agent reports; it alone raises and clears them."""

    model = NodeCondition


@admin.register(Rack)
class RackAdmin(admin.ModelAdmin[Rack]):
    list_display = ["name", "kind", "location", "compute_slots", "switch_slots", "position"]
    search_fields = ["name", "location"]


@admin.register(Clique)
class CliqueAdmin(admin.ModelAdmin[Clique]):
    list_display = ["__str__", "cluster_uuid", "clique_id", "rack"]
    list_select_related = ["rack"]
    search_fields = ["name", "cluster_uuid"]


def _tray_action(
    service: Callable[..., Node], description: str
) -> Callable[[NodeAdmin, HttpRequest, QuerySet[Node]], None]:
    @admin.action(description=description, permissions=["change"])
    def action(model_admin: NodeAdmin, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        if not request.user.is_authenticated:
            return
        actor = Actor.for_user(request.user)
        for node in queryset:
            try:
                service(actor=actor, node=node, reason="from the Django admin")
            except DomainError as exc:
                messages.error(request, f"{node.hostname}: {exc.message}")

    action.__name__ = service.__name__
    return action


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin[Node]):
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
    # What the state machine, the agent or Kubernetes says: changed through the services.
    readonly_fields = [
        "hostname", "management_ip", "clique", "state", "state_reason", "source", "gone",
        "gpu_count", "gpu_product", "driver_version", "imex_version", "channel_major",
        "channel_count", "agent_version", "last_heartbeat", "daemon_state", "agent_report",
    ]  # fmt: skip
    inlines = [NodeConditionInline, GpuInline]
    actions = [
        _tray_action(node_cordon, "Cordon: no new domain lands here"),
        _tray_action(node_drain, "Drain: cordon, for maintenance"),
        _tray_action(node_uncordon, "Uncordon: back into the pool"),
        _tray_action(node_mark_down, "Mark down: the tray is dead"),
    ]


@admin.register(Gpu)
class GpuAdmin(ReadOnlyAdmin[Gpu]):
    list_display = ["uuid", "node", "index", "product", "fabric_state", "health"]
    list_filter = ["fabric_state", "health"]
    list_select_related = ["node"]
    search_fields = ["uuid", "node__hostname"]


@admin.register(SwitchTray)
class SwitchTrayAdmin(ReadOnlyAdmin[SwitchTray]):
    """State changes go through the operator's impact page or the API (an event each)."""

    list_display = ["name", "rack", "slot", "state", "state_reason"]
    list_filter = ["state"]
    list_select_related = ["rack"]


@admin.register(PowerShelf)
class PowerShelfAdmin(ReadOnlyAdmin[PowerShelf]):
    """State changes go through the operator's impact page or the API (an event each)."""

    list_display = ["name", "rack", "position", "psu_count", "psu_watts", "state", "state_reason"]
    list_filter = ["state"]
    list_select_related = ["rack"]
