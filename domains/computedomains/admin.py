from django.contrib import admin

from domains.computedomains.models import ChannelAllocation, ComputeDomain, DomainMember, Event


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


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_name", "verb", "object_repr", "namespace", "request_id"]
    list_filter = ["actor_kind", "verb"]
    list_select_related = ["namespace"]
    search_fields = ["object_repr", "request_id", "actor_name"]
    date_hierarchy = "created_at"

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False  # the audit log is append-only
