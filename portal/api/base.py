"""The one base every API viewset derives from, so no endpoint can forget tenancy.

`get_queryset()` always goes through `scoped_queryset(user)`, a selector call with the
caller; namespaced resources first resolve `{namespace}` among the namespaces the caller
can see and answer 404 otherwise (never 403: another tenant's names must not leak).
Side effects call exactly one service with `self.actor` (`call_service`, or
`call_with_body` for a body passed on as it is checked); nothing here writes the ORM.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db.models import Model, QuerySet
from rest_framework import viewsets
from rest_framework.exceptions import NotAuthenticated, ParseError
from rest_framework.request import Request
from rest_framework.serializers import Serializer

from domains.audit.events import Actor
from domains.errors import DomainError
from domains.tenancy.models import Namespace
from domains.tenancy.selectors import Viewer, is_operator, namespace_for

T = TypeVar("T")
M = TypeVar("M", bound=Model)


def call_service(
    service: Callable[..., T],
    *,
    api_names: Mapping[str, str],
    in_message: bool = False,
    **kwargs: Any,
) -> T:
    """Run one service; a DomainError it raises names its field as the API body does
    (`api_names`: the service's name of a field → the body's), and with `in_message` its
    message starts with that name too."""
    try:
        return service(**kwargs)
    except DomainError as exc:
        if exc.field is not None and exc.field in api_names:
            exc.field = api_names[exc.field]
            if in_message:
                exc.message = f"{exc.field}: {exc.message}"
        raise


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

    def call_with_body(
        self, input_class: type[Serializer], service: Callable[..., T], **kwargs: Any
    ) -> T:
        """Input, service, field names: the request body checked by `input_class` (a 400
        naming the field), then `service` called with its fields under their `source`
        names and `kwargs`; a DomainError it raises names the field as the body does."""
        body = input_class(data=self.request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        api_names = {str(f.source): name for name, f in body.fields.items() if f.source != name}
        return call_service(service, api_names=api_names, **body.validated_data, **kwargs)


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


def refreshed(obj: M, queryset: QuerySet[M]) -> M:
    """Re-read an object through its scoped queryset after a service changed it."""
    return queryset.get(pk=obj.pk)
