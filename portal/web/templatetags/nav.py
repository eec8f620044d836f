"""The top bar's per-user links (one query whatever the number of memberships) and the footer."""

from __future__ import annotations

from django import template

from domain_portal import __version__
from domains.computedomains.models import Phase
from domains.computedomains.selectors import approvals_visible_to
from domains.notifications.selectors import unread_count
from domains.tenancy.models import Membership
from domains.tenancy.selectors import Viewer

register = template.Library()


@register.simple_tag
def member_namespaces(user: Viewer) -> list[str]:
    """Names of the namespaces the user is a member of (for the navigation)."""
    if not user.is_authenticated:
        return []
    return list(
        Membership.objects.filter(user=user)
        .order_by("namespace__name")
        .values_list("namespace__name", flat=True)
    )


@register.simple_tag
def pending_approvals(user: Viewer) -> int:
    """Requests waiting for a portal admin's decision (the navbar badge; one query)."""
    if not user.is_authenticated:
        return 0
    return approvals_visible_to(user).filter(phase=Phase.PENDING).count()


@register.simple_tag
def unread_notifications(user: Viewer) -> int:
    """The user's unread in-app notifications (the navbar badge; one query)."""
    return unread_count(user)


@register.simple_tag
def portal_version() -> str:
    """The running release, for the footer (the same string /healthz and the agents send)."""
    return __version__
