"""Namespaces and their quotas, the caller's API tokens, and the audit log."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from domains.audit.models import Event
from domains.computedomains.selectors import events_visible_to, quota_usage
from domains.errors import InvalidInput
from domains.tenancy.models import ApiToken, Namespace, Quota
from domains.tenancy.selectors import Viewer, is_admin, namespaces_with_role, tokens_of
from domains.tenancy.services import namespace_create, quota_set
from domains.tenancy.tokens import token_create, token_revoke
from portal.api.base import ScopedViewSet, call_service
from portal.api.schema import READ, WRITE, errors
from portal.api.serializers.tenancy import (
    QUOTA_FIELDS,
    ApiTokenInput,
    ApiTokenSerializer,
    EventSerializer,
    NamespaceInput,
    NamespaceSerializer,
    NewApiTokenSerializer,
    QuotaInput,
    QuotaSerializer,
)
from portal.api.throttles import TokenMintRate

QUOTA_API_NAMES = {field: api for api, field in QUOTA_FIELDS.items()}


class NamespaceViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, ScopedViewSet
):
    """The namespaces (tenants) you belong to; operators see all of them. Portal admins
    create them."""

    serializer_class = NamespaceSerializer
    lookup_field = "name"
    lookup_url_kwarg = "namespace"
    lookup_value_regex = "[^/]+"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Namespace]:
        return namespaces_with_role(user)

    @extend_schema(
        request=NamespaceInput,
        responses={201: NamespaceSerializer, **errors(*WRITE)},
        summary="Create a namespace (tenant) with its quota (portal admins).",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not is_admin(request.user):
            raise PermissionDenied("Only portal admins may create namespaces.")
        namespace = self.call_with_body(NamespaceInput, namespace_create, actor=self.actor)
        created = self.get_queryset().get(pk=namespace.pk)
        return Response(NamespaceSerializer(created).data, status=status.HTTP_201_CREATED)

    def _quota_body(self, namespace: Namespace) -> dict[str, Any]:
        quota = Quota.objects.filter(namespace=namespace).first()
        return QuotaSerializer(QuotaSerializer.shape(namespace, quota, quota_usage(namespace))).data

    @extend_schema(
        methods=["GET"],
        responses={200: QuotaSerializer, **errors(*READ)},
        summary="The namespace's limits and what its live domains use now.",
    )
    @extend_schema(
        methods=["PUT", "PATCH"],
        request=QuotaInput,
        responses={200: QuotaSerializer, **errors(*WRITE)},
        summary="Set limits (portal admins). PUT: missing limits become unlimited.",
    )
    @action(detail=True, methods=["get", "put", "patch"], serializer_class=QuotaSerializer)
    def quota(self, request: Request, namespace: str) -> Response:
        ns = self.get_object()
        if request.method in {"PUT", "PATCH"}:
            if not is_admin(request.user):
                raise PermissionDenied("Only portal admins may change quotas.")
            body = QuotaInput(data=request.data)
            body.is_valid(raise_exception=True)
            limits = body.limits(partial=request.method == "PATCH")
            call_service(
                quota_set, api_names=QUOTA_API_NAMES, actor=self.actor, namespace=ns, **limits
            )
        return Response(self._quota_body(ns))


class TokenViewSet(
    mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, ScopedViewSet
):
    """Your personal API tokens. The secret is shown once, in the create answer."""

    serializer_class = ApiTokenSerializer
    throttle_classes = [TokenMintRate]  # 429 past PORTAL_TOKEN_MINTS_PER_MIN

    def scoped_queryset(self, user: Viewer) -> QuerySet[ApiToken]:
        return tokens_of(user)

    @extend_schema(
        request=ApiTokenInput,
        responses={201: NewApiTokenSerializer, **errors(*WRITE)},
        summary="Create a token; copy the `token` now, it is never shown again.",
        description="A token created with a token (rather than a signed-in browser) is its "
        "child: it expires no later than its parent (`expiresAt` is capped), is read-only if "
        "the parent is, and is revoked with it.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = ApiTokenInput(data=request.data)
        body.is_valid(raise_exception=True)
        days = body.validated_data["expiresInDays"]
        token, raw = token_create(
            actor=self.actor,
            user=self.signed_in_user,
            name=body.validated_data["name"],
            read_only=body.validated_data["readOnly"],
            expires_in=timedelta(days=days) if days else None,
            # A token minted with a token is its child: it expires no later and dies with it.
            parent=request.auth if isinstance(request.auth, ApiToken) else None,
        )
        token.token = raw  # type: ignore[attr-defined]
        response = Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"  # the secret is shown once: never kept or cached
        return response

    @extend_schema(responses={204: None, **errors(*WRITE)}, summary="Revoke a token.")
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        token_revoke(actor=self.actor, token=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


EVENT_FILTERS = [
    OpenApiParameter("namespace", OpenApiTypes.STR, description="Only this namespace."),
    OpenApiParameter("verb", OpenApiTypes.STR, description="e.g. domain.requested"),
    OpenApiParameter("domain", OpenApiTypes.UUID, description="Only this domain (uid)."),
]


class EventViewSet(mixins.ListModelMixin, ScopedViewSet):
    """The audit log, newest first: operators read all of it, tenants their namespaces'."""

    serializer_class = EventSerializer

    def scoped_queryset(self, user: Viewer) -> QuerySet[Event]:
        qs = events_visible_to(user)
        params = self.request.query_params
        if params.get("namespace"):
            qs = qs.filter(namespace__name=params["namespace"])
        if params.get("verb"):
            qs = qs.filter(verb=params["verb"])
        if "domain" in params:  # present but empty or not a uid: a 400, not "no filter"
            qs = qs.filter(domain__uid=_uuid(params["domain"], field="domain"))
        return qs

    @extend_schema(parameters=EVENT_FILTERS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)


def _uuid(text: str, *, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInput(f"{field}: must be a uid such as {uuid.UUID(int=0)}", field=field)
