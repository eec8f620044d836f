from django.contrib import admin

from domains.audit.models import Event


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_name", "verb", "object_repr", "namespace", "request_id"]
    list_filter = ["actor_kind", "verb"]
    list_select_related = ["namespace"]
    search_fields = ["object_repr", "request_id", "actor_name"]
    date_hierarchy = "created_at"

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False  # the audit log is append-only
