"""The audit log in the Django admin: append-only, and only the services append."""

from __future__ import annotations

from django.contrib import admin

from domains.admin import ReadOnlyAdmin
from domains.audit.models import Event


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin[Event]):
    """The audit log is append-only, and only the services append."""

    list_display = ["created_at", "actor_name", "verb", "object_repr", "namespace", "request_id"]
    list_filter = ["actor_kind", "verb"]
    list_select_related = ["namespace"]
    search_fields = ["object_repr", "request_id", "actor_name"]
    date_hierarchy = "created_at"
