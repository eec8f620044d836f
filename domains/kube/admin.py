"""Read-only admin views of the Kubernetes bookkeeping: what was published, refused, synced."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from domains.kube.models import PublishedDomain, RefusedComputeDomain, SyncState


class ReadOnly(admin.ModelAdmin):
    """Written only by the sync and the publisher; the admin looks, never edits."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PublishedDomain)
class PublishedDomainAdmin(ReadOnly):
    list_display = ["domain", "adopted", "removed", "published_at", "attempts", "last_error"]
    list_filter = ["adopted", "removed"]
    list_select_related = ["domain", "domain__namespace"]


@admin.register(RefusedComputeDomain)
class RefusedComputeDomainAdmin(ReadOnly):
    list_display = ["namespace", "name", "reason", "message", "reported", "updated_at"]


@admin.register(SyncState)
class SyncStateAdmin(ReadOnly):
    list_display = ["resource", "resource_version", "listed_at", "items", "errors", "last_error_at"]
