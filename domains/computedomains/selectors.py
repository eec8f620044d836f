"""Reads of ComputeDomains, always scoped to who is asking."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from domains.computedomains.models import ComputeDomain, Event
from domains.tenancy.selectors import is_operator, namespaces_visible_to


def domains_visible_to(user: Any) -> QuerySet[ComputeDomain]:
    """Operators see every domain; tenants only those of their namespaces."""
    qs = ComputeDomain.objects.select_related("namespace", "requested_by")
    if is_operator(user):
        return qs
    return qs.filter(namespace__in=namespaces_visible_to(user))


def events_visible_to(user: Any) -> QuerySet[Event]:
    """Operators read the whole audit log; tenants the events of their namespaces."""
    qs = Event.objects.select_related("namespace", "domain", "node", "actor_user")
    if is_operator(user):
        return qs
    return qs.filter(namespace__in=namespaces_visible_to(user))
