"""Namespaces in the Django admin, read-only with their quotas, memberships and API tokens:
the portal's admin pages and API change them through the services (namespace lock, audit
events)."""

from __future__ import annotations

from django.contrib import admin

from domains.admin import ReadOnlyAdmin, ReadOnlyInline
from domains.tenancy.models import ApiToken, Membership, Namespace, Quota


class MembershipInline(ReadOnlyInline[Membership]):
    model = Membership


class QuotaInline(ReadOnlyInline[Quota]):
    model = Quota


@admin.register(Namespace)
class NamespaceAdmin(ReadOnlyAdmin[Namespace]):
    list_display = ["name", "display_name", "source", "active", "created_at"]
    list_filter = ["source", "active"]
    search_fields = ["name", "display_name"]
    inlines = [QuotaInline, MembershipInline]


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin[Membership]):
    list_display = ["user", "namespace", "role"]
    list_filter = ["role", "namespace"]
    list_select_related = ["user", "namespace"]


@admin.register(Quota)
class QuotaAdmin(ReadOnlyAdmin[Quota]):
    list_display = ["namespace", "max_gpus", "max_nodes", "max_domains", "max_nodes_per_domain"]
    list_select_related = ["namespace"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin[ApiToken]):
    list_display = ["user", "name", "prefix", "read_only", "expires_at", "last_used_at"]
    list_select_related = ["user"]
    exclude = ["token_hash"]
