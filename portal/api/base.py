"""The one base every API viewset derives from, so no endpoint can forget tenancy.

`get_queryset()` always goes through `scoped_queryset(user)`, a selector call with the
caller; namespaced resources first resolve `{namespace}` among the namespaces the caller
can see and answer 404 otherwise (never 403: another tenant's names must not leak).
Side effects call exactly one service with `self.actor`; nothing here writes the ORM.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Model, QuerySet
from rest_framework import viewsets
from rest_framework.exceptions import NotAuthenticated, ParseError
from rest_framework.request import Request

from domains.audit.events import Actor
from domains.tenancy.models import Namespace
from domains.tenancy.selectors import Viewer, is_operator, namespace_for


class ScopedViewSet(viewsets.GenericViewSet):
    """Base for every API viewset: querysets are a function of who is asking."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # PostgreSQL cannot compare text with NUL characters; refuse them before any query.
        values = [*self.kwargs.values(), *request.query_params.values()]
        if any("\x00" in str(value) for value in values):
            raise ParseError("NUL characters are not allowed in the URL")

    def scoped_queryset(self, user: Viewer) -> QuerySet[Any]:
        raise NotImplementedError(f"{type(self).__name__} must scope its queryset")

    def get_queryset(self) -> QuerySet[Any]:
        return self.scoped_queryset(self.request.user)

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        if getattr(self, "swagger_fake_view", False):
            return context
        context["operator"] = is_operator(self.request.user)
        return context

    @property
    def signed_in_user(self) -> User:
        """The caller, on actions whose permissions let only signed-in users through."""
        user = self.request.user
        if not user.is_authenticated:
            raise NotAuthenticated()
        return user

    @property
    def actor(self) -> Actor:
        return Actor.for_user(self.signed_in_user)


class NamespacedViewSet(ScopedViewSet):
    """Resources under `namespaces/{namespace}/`: the namespace is resolved (or 404) after
    authentication, so anonymous callers get 401 and other tenants 404."""

    namespace: Namespace

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if not getattr(self, "swagger_fake_view", False):
            self.namespace = namespace_for(request.user, self.kwargs["namespace"])

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        context["namespace"] = getattr(self, "namespace", None)
        return context


def refreshed(obj: Model, queryset: QuerySet[Any]) -> Any:
    """Re-read an object through its scoped queryset after a service changed it."""
    return queryset.get(pk=obj.pk)
