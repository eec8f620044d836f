"""The audit log in the Django admin, and the read-only base every lifecycle model uses.

State changes go through the services, which lock, compare-and-set, write an Event and
announce the change; an admin form that saved a row directly would do none of that. So the
admin shows such rows and offers, where useful, actions that call the services.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from domains.audit.models import Event

_M = TypeVar("_M", bound=Model)


class ReadOnlyAdmin(admin.ModelAdmin[_M]):
    """Look, never add, edit or delete: the services own these rows."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline[_M, Any]):
    """Rows shown inside another's page, never edited there."""

    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin[Event]):
    """The audit log is append-only, and only the services append."""

    list_display = ["created_at", "actor_name", "verb", "object_repr", "namespace", "request_id"]
    list_filter = ["actor_kind", "verb"]
    list_select_related = ["namespace"]
    search_fields = ["object_repr", "request_id", "actor_name"]
    date_hierarchy = "created_at"
