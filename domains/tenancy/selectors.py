"""Who may see and do what in which namespace, and the reads of namespaces, their members
and API tokens that start from who is asking.

Roles: namespace viewer < member < admin (per namespace, Membership); operator
(`is_staff`: the whole fabric, every domain read-only, tray actions); superuser (portal
admin: quotas, approvals, everything).
"""

from __future__ import annotations

from typing import TypeAlias

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import OuterRef, QuerySet, Subquery

from domains.errors import NotFound
from domains.tenancy.models import ApiToken, Membership, Namespace, Role

# Whoever asks for a page or an API call: a signed-in user, or an anonymous visitor.
Viewer: TypeAlias = User | AnonymousUser

_RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.ADMIN: 3}


def is_operator(user: Viewer) -> bool:
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


def is_admin(user: Viewer) -> bool:
    return bool(user.is_authenticated and user.is_superuser)


def role_in(user: Viewer, namespace: Namespace) -> str | None:
    """The user's own role in the namespace (None when not a member); no query when the
    namespace came from `namespace_for` for this same user."""
    if not user.is_authenticated:
        return None
    read_for = getattr(namespace, "viewer_role_of", None)
    if read_for is not None and read_for == user.pk:
        return getattr(namespace, "viewer_role", None)
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


def visible_namespace_ids(user: Viewer) -> set[int] | None:
    """Namespaces whose domains the user may name; None means all (operators)."""
    if is_operator(user):
        return None
    return set(namespaces_visible_to(user).values_list("id", flat=True))


def namespace_for(user: Viewer, name: str) -> Namespace:
    """The namespace if the user may see it; NotFound otherwise, so names don't leak.

    The user's own role in it is read along (`viewer_role`, for `viewer_role_of`, the
    user's pk), so the permission check of the request that follows costs no query."""
    namespaces = namespaces_visible_to(user).filter(name=name)
    if user.is_authenticated:
        role = Membership.objects.filter(namespace=OuterRef("pk"), user=user).values("role")[:1]
        namespaces = namespaces.annotate(viewer_role=Subquery(role))
    namespace = namespaces.first()
    if namespace is None:
        raise NotFound(f"namespace {name!r} not found")
    if user.is_authenticated:
        namespace.viewer_role_of = user.pk  # type: ignore[attr-defined]
    return namespace


def namespaces_with_role(user: Viewer) -> QuerySet[Namespace]:
    """Visible namespaces with the caller's own role annotated (`my_role`, None for
    non-members) and their quota, by name."""
    if not user.is_authenticated:
        return Namespace.objects.none()
    role = Membership.objects.filter(namespace=OuterRef("pk"), user=user).values("role")[:1]
    return (
        namespaces_visible_to(user)
        .select_related("quota")
        .annotate(my_role=Subquery(role))
        .order_by("name")
    )


def members_of(namespace: Namespace) -> QuerySet[Membership]:
    """Who belongs to a namespace (resolved for the caller by `namespace_for`), by name."""
    return (
        Membership.objects.filter(namespace=namespace)
        .select_related("user")
        .order_by("user__username")
    )


def tokens_of(user: Viewer) -> QuerySet[ApiToken]:
    """The caller's own live tokens, newest first; nobody lists anybody else's."""
    if not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).order_by("-created_at")


def user_named(username: str) -> User:
    """An active user by username, for adding members; NotFound otherwise."""
    model = get_user_model()
    user = model.objects.filter(**{model.USERNAME_FIELD: username, "is_active": True}).first()
    if user is None:
        raise NotFound(f"no user named {username!r}")
    return user


def namespaces_with_quotas() -> QuerySet[Namespace]:
    """Every namespace with its quota (None when never set), by name (portal admins)."""
    return Namespace.objects.select_related("quota").order_by("name")


def namespaces_with_members() -> QuerySet[Namespace]:
    """Every namespace with its memberships and their users, by name (portal admins)."""
    return Namespace.objects.prefetch_related("memberships__user").order_by("name")
