"""Domains, members and the channel ledger in the Django admin: read-only (their phase and
states change only through the services); releasing goes through `domain_release`."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from domains.audit.admin import ReadOnlyAdmin, ReadOnlyInline
from domains.audit.events import Actor
from domains.computedomains.models import ChannelAllocation, ComputeDomain, DomainMember
from domains.computedomains.services import domain_release


class DomainMemberInline(ReadOnlyInline[DomainMember]):
    model = DomainMember
    fields = ["index", "node", "state", "active", "step", "daemon_state", "message"]


@admin.register(ComputeDomain)
class ComputeDomainAdmin(ReadOnlyAdmin[ComputeDomain]):
    list_display = ["name", "namespace", "num_nodes", "allocation_mode", "phase", "created_at"]
    list_filter = ["phase", "allocation_mode", "namespace"]
    list_select_related = ["namespace"]
    search_fields = ["name", "uid"]
    inlines = [DomainMemberInline]
    actions = ["release"]

    @admin.action(description="Release the selected domains", permissions=["view"])
    def release(self, request: HttpRequest, queryset: QuerySet[ComputeDomain]) -> None:
        if not request.user.is_authenticated:
            return
        actor = Actor.for_user(request.user)
        for domain in queryset.select_related("namespace"):
            domain_release(actor=actor, domain=domain, reason="from the Django admin")
        messages.success(request, f"Asked {queryset.count()} domain(s) to release.")


@admin.register(DomainMember)
class DomainMemberAdmin(ReadOnlyAdmin[DomainMember]):
    list_display = ["domain", "index", "node", "state", "active"]
    list_filter = ["state", "active"]
    list_select_related = ["domain__namespace", "node"]


@admin.register(ChannelAllocation)
class ChannelAllocationAdmin(ReadOnlyAdmin[ChannelAllocation]):
    list_display = ["clique", "channel", "domain", "allocated_at", "released_at"]
    list_select_related = ["clique", "domain__namespace"]
