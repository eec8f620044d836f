from django.contrib import admin

from domains.inventory.models import Clique, Gpu, Node, Rack


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0


@admin.register(Rack)
class RackAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "location", "compute_slots", "switch_slots", "position"]
    search_fields = ["name", "location"]


@admin.register(Clique)
class CliqueAdmin(admin.ModelAdmin):
    list_display = ["__str__", "cluster_uuid", "clique_id", "rack"]
    list_select_related = ["rack"]
    search_fields = ["name", "cluster_uuid"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
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
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["uuid", "node", "index", "product", "fabric_state", "health"]
    list_filter = ["fabric_state", "health"]
    list_select_related = ["node"]
    search_fields = ["uuid", "node__hostname"]
