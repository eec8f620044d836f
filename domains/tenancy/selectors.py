"""Who may see and do what in which namespace.

Roles: namespace viewer < member < admin (per namespace, Membership); operator
(`is_staff`: the whole fabric, every domain read-only, tray actions); superuser (portal
admin: quotas, approvals, everything).
"""

from __future__ import annotations

from typing import TypeAlias

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from domains.tenancy.models import Membership, Namespace, Role

# Whoever asks for a page or an API call: a signed-in user, or an anonymous visitor.
Viewer: TypeAlias = User | AnonymousUser

_RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.ADMIN: 3}


def is_operator(user: Viewer) -> bool:
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


def is_admin(user: Viewer) -> bool:
    return bool(user.is_authenticated and user.is_superuser)


def role_in(user: Viewer, namespace: Namespace) -> str | None:
    """The user's own role in the namespace (None when not a member)."""
    if not user.is_authenticated:
        return None
    return (
        Membership.objects.filter(user=user, namespace=namespace)
        .values_list("role", flat=True)
        .first()
    )


def _has_role(user: Viewer, namespace: Namespace, minimum: str) -> bool:
    role = role_in(user, namespace)
    return role is not None and _RANK[Role(role)] >= _RANK[Role(minimum)]


def can_view_namespace(user: Viewer, namespace: Namespace) -> bool:
    return is_operator(user) or _has_role(user, namespace, Role.VIEWER)


def can_request_in(user: Viewer, namespace: Namespace) -> bool:
    """Request, release and extend domains (members and namespace admins)."""
    return is_admin(user) or _has_role(user, namespace, Role.MEMBER)


def can_admin_namespace(user: Viewer, namespace: Namespace) -> bool:
    """Manage members of the namespace (namespace admins and superusers)."""
    return is_admin(user) or _has_role(user, namespace, Role.ADMIN)


def namespaces_visible_to(user: Viewer) -> QuerySet[Namespace]:
    if not user.is_authenticated:
        return Namespace.objects.none()
    if is_operator(user):
        return Namespace.objects.all()
    return Namespace.objects.filter(memberships__user=user).distinct()
