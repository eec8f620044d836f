"""Racks, cliques, GPUs and the rack's other parts in the Django admin, read-only: they come
from seeding, the agents' joins and Kubernetes, and change through the services. Trays and
their actions are in domains/computedomains/admin.py, beside the rules those actions obey."""

from __future__ import annotations

from django.contrib import admin

from domains.admin import ReadOnlyAdmin, ReadOnlyInline
from domains.inventory.models import Clique, Gpu, NodeCondition, PowerShelf, Rack, SwitchTray


class GpuInline(ReadOnlyInline[Gpu]):
    model = Gpu


class NodeConditionInline(ReadOnlyInline[NodeCondition]):
    """What the tray's agent reports; it alone raises and clears them."""

    model = NodeCondition


@admin.register(Rack)
class RackAdmin(ReadOnlyAdmin[Rack]):
    list_display = ["name", "kind", "location", "compute_slots", "switch_slots", "position"]
    search_fields = ["name", "location"]


@admin.register(Clique)
class CliqueAdmin(ReadOnlyAdmin[Clique]):
    list_display = ["__str__", "cluster_uuid", "clique_id", "rack"]
    list_select_related = ["rack"]
    search_fields = ["name", "cluster_uuid"]


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
