"""Read helpers the API needs beyond the domain selectors: list shapes with their counts
in one query each (no N+1), always starting from who is asking."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, OuterRef, Prefetch, Q, QuerySet, Subquery

from domains.computedomains.models import (
    TERMINAL_PHASES,
    ApprovalState,
    ComputeDomain,
    DomainMember,
)
from domains.computedomains.selectors import domains_visible_to
from domains.errors import NotFound
from domains.inventory.models import Clique, Node, NodeState, Rack
from domains.tenancy.models import ApiToken, Membership, Namespace
from domains.tenancy.selectors import is_admin, is_operator, namespaces_visible_to

_LIVE_MEMBER = Q(nodes__memberships__active=True)


def visible_namespace_ids(user: Any) -> set[int] | None:
    """Namespaces whose domains the user may name; None means all (operators)."""
    if is_operator(user):
        return None
    return set(namespaces_visible_to(user).values_list("id", flat=True))


def namespace_for(user: Any, name: str) -> Namespace:
    """The namespace if the user may see it; NotFound otherwise, so names don't leak."""
    namespace = namespaces_visible_to(user).filter(name=name).first()
    if namespace is None:
        raise NotFound(f"namespace {name!r} not found")
    return namespace


def namespaces_for_api(user: Any) -> QuerySet[Namespace]:
    """Visible namespaces with the caller's own role annotated (None for non-members)."""
    role = Membership.objects.filter(namespace=OuterRef("pk"), user=user).values("role")[:1]
    return (
        namespaces_visible_to(user)
        .select_related("quota")
        .annotate(my_role=Subquery(role))
        .order_by("name")
    )


def racks_for_api(user: Any) -> QuerySet[Rack]:
    """Every rack (the fabric is visible to every signed-in user) with tray counts."""
    if not user.is_authenticated:
        return Rack.objects.none()
    return (
        Rack.objects.annotate(
            trays_total=Count("nodes", distinct=True),
            trays_ready=Count("nodes", filter=Q(nodes__state=NodeState.READY), distinct=True),
            trays_in_use=Count("nodes", filter=_LIVE_MEMBER, distinct=True),
        )
        .prefetch_related(Prefetch("cliques", queryset=Clique.objects.order_by("clique_id")))
        .order_by("position", "name")
    )


def cliques_for_api(user: Any) -> QuerySet[Clique]:
    if not user.is_authenticated:
        return Clique.objects.none()
    return (
        Clique.objects.select_related("rack")
        .annotate(
            trays_total=Count("nodes", distinct=True),
            trays_ready=Count("nodes", filter=Q(nodes__state=NodeState.READY), distinct=True),
            trays_in_use=Count("nodes", filter=_LIVE_MEMBER, distinct=True),
        )
        .order_by("rack__position", "rack__name", "clique_id", "pk")
    )


def nodes_for_api(user: Any) -> QuerySet[Node]:
    """Every tray with its live membership prefetched (the serializer decides what of the
    domain the caller may see)."""
    if not user.is_authenticated:
        return Node.objects.none()
    live = DomainMember.objects.filter(active=True).select_related("domain__namespace")
    return Node.objects.select_related("rack", "clique").prefetch_related(
        Prefetch("memberships", queryset=live, to_attr="live_memberships")
    )


def domains_for_api(user: Any, namespace: Namespace) -> QuerySet[ComputeDomain]:
    members = DomainMember.objects.select_related("node", "clique").order_by("index")
    return (
        domains_visible_to(user)
        .filter(namespace=namespace)
        .prefetch_related(Prefetch("members", queryset=members))
    )


def domain_by_name(user: Any, namespace: Namespace, name: str) -> ComputeDomain:
    """The live domain of that name, else the latest ended one (names are reusable once a
    domain has ended, like a deleted Kubernetes object)."""
    qs = domains_for_api(user, namespace).filter(name=name)
    domain = qs.exclude(phase__in=TERMINAL_PHASES).first() or qs.order_by("-created_at").first()
    if domain is None:
        raise NotFound(f"computedomain {name!r} not found in namespace {namespace.name!r}")
    return domain


def approvals_for_api(user: Any) -> QuerySet[ComputeDomain]:
    """Domains waiting for a portal admin's decision."""
    if not is_admin(user):
        return ComputeDomain.objects.none()
    members = DomainMember.objects.select_related("node", "clique").order_by("index")
    return (
        domains_visible_to(user)
        .filter(approval_state=ApprovalState.PENDING)
        .prefetch_related(Prefetch("members", queryset=members))
        .order_by("created_at")
    )


def tokens_of(user: Any) -> QuerySet[ApiToken]:
    """The caller's own live tokens; nobody lists anybody else's."""
    if not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).order_by("-created_at")


def members_of(namespace: Namespace) -> QuerySet[Membership]:
    """Who belongs to a namespace the caller can see (resolved by `namespace_for`)."""
    return (
        Membership.objects.filter(namespace=namespace)
        .select_related("user")
        .order_by("user__username")
    )


def user_named(username: str) -> Any:
    """An active user by username, for adding members; NotFound otherwise."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    user = User.objects.filter(**{User.USERNAME_FIELD: username, "is_active": True}).first()
    if user is None:
        raise NotFound(f"no user named {username!r}")
    return user
