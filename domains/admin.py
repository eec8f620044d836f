"""The read-only base of every model in the Django admin.

State changes go through the services, which lock, compare-and-set, write an Event and
announce the change; an admin form that saved a row directly would do none of that. So the
admin shows rows and offers, where useful, actions that call the services.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

_M = TypeVar("_M", bound=Model)


class _NoWrites:
    """No add, change or delete permission, whoever asks."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(_NoWrites, admin.ModelAdmin[_M]):
    """Look, never add, edit or delete: the services own these rows."""


class ReadOnlyInline(_NoWrites, admin.TabularInline[_M, Any]):
    """Rows shown inside another's page, never edited there."""

    extra = 0
