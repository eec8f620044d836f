from django.contrib import admin

from domains.computedomains.models import ChannelAllocation, ComputeDomain, DomainMember


class DomainMemberInline(admin.TabularInline):
    model = DomainMember
    extra = 0
    raw_id_fields = ["node"]
    readonly_fields = ["state", "daemon_state", "message", "generation_applied"]


@admin.register(ComputeDomain)
class ComputeDomainAdmin(admin.ModelAdmin):
    list_display = ["name", "namespace", "num_nodes", "allocation_mode", "phase", "created_at"]
    list_filter = ["phase", "allocation_mode", "namespace"]
    list_select_related = ["namespace"]
    search_fields = ["name", "uid"]
    readonly_fields = ["uid", "generation", "created_at", "updated_at"]
    inlines = [DomainMemberInline]


@admin.register(DomainMember)
class DomainMemberAdmin(admin.ModelAdmin):
    list_display = ["domain", "index", "node", "state", "active"]
    list_filter = ["state", "active"]
    list_select_related = ["domain__namespace", "node"]


@admin.register(ChannelAllocation)
class ChannelAllocationAdmin(admin.ModelAdmin):
    list_display = ["clique", "channel", "domain", "allocated_at", "released_at"]
    list_select_related = ["clique", "domain__namespace"]
