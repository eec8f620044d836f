"""The fleet's join tokens for portal admins: list, mint (the secret shown once), revoke."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from domains.agents.jointokens import join_token_create, join_token_revoke, join_tokens_visible_to
from domains.agents.models import JoinToken
from domains.tenancy.selectors import Viewer
from portal.api.base import ScopedViewSet
from portal.api.permissions import IsPortalAdmin
from portal.api.schema import WRITE, errors
from portal.api.serializers.jointokens import (
    JoinTokenInput,
    JoinTokenSerializer,
    NewJoinTokenSerializer,
)


class JoinTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    """Join tokens: what node agents register trays with (portal admins only)."""

    serializer_class = JoinTokenSerializer
    permission_classes = [*ScopedViewSet.permission_classes, IsPortalAdmin]

    def scoped_queryset(self, user: Viewer) -> QuerySet[JoinToken]:
        return join_tokens_visible_to(user)

    @extend_schema(
        request=JoinTokenInput,
        responses={201: NewJoinTokenSerializer, **errors(*WRITE)},
        summary="Mint a join token; copy the `token` now, it is never shown again.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = JoinTokenInput(data=request.data)
        body.is_valid(raise_exception=True)
        token, raw = join_token_create(
            actor=self.actor,
            name=body.validated_data["name"],
            expires_in=timedelta(hours=body.validated_data["expiresInHours"]),
            max_uses=body.validated_data["maxUses"],
        )
        token.token = raw  # type: ignore[attr-defined]
        response = Response(NewJoinTokenSerializer(token).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"  # the secret is shown once: never kept or cached
        return response

    @extend_schema(
        responses={204: None, **errors(*WRITE)},
        summary="Revoke a join token: agents presenting it are refused from now on.",
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        join_token_revoke(actor=self.actor, token=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
