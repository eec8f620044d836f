"""Read-only admin views of the Kubernetes bookkeeping: what was published, refused, synced."""

from __future__ import annotations

from django.contrib import admin

from domains.admin import ReadOnlyAdmin
from domains.kube.models import PublishedDomain, RefusedComputeDomain, SyncState


@admin.register(PublishedDomain)
class PublishedDomainAdmin(ReadOnlyAdmin[PublishedDomain]):
    list_display = ["domain", "adopted", "removed", "published_at", "attempts", "last_error"]
    list_filter = ["adopted", "removed"]
    list_select_related = ["domain", "domain__namespace"]


@admin.register(RefusedComputeDomain)
class RefusedComputeDomainAdmin(ReadOnlyAdmin[RefusedComputeDomain]):
    list_display = ["namespace", "name", "reason", "message", "reported", "updated_at"]


@admin.register(SyncState)
class SyncStateAdmin(ReadOnlyAdmin[SyncState]):
    list_display = ["resource", "resource_version", "listed_at", "items", "errors", "last_error_at"]
