"""Racks, cliques and trays: read by everyone signed in; tray actions for operators."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from domains.computedomains.fabric import (
    cliques_with_occupancy,
    nodes_with_holders,
    racks_with_occupancy,
)
from domains.inventory.models import Clique, Node, Rack
from domains.inventory.services import node_cordon, node_drain, node_uncordon
from domains.tenancy.selectors import Viewer
from portal.api.base import ScopedViewSet, refreshed
from portal.api.permissions import IsOperator, TokenScope
from portal.api.schema import WRITE, errors
from portal.api.serializers.common import ReasonSerializer
from portal.api.serializers.fabric import CliqueSerializer, NodeSerializer, RackSerializer


class RackViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """NVLink racks with tray counts."""

    serializer_class = RackSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Rack]:
        return racks_with_occupancy(user)


class CliqueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """NVLink partitions (`<cluster_uuid>.<clique_id>`): a domain never spans two."""

    serializer_class = CliqueSerializer
    lookup_value_regex = "[^/]+"
    lookup_url_kwarg = "label"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Clique]:
        return cliques_with_occupancy(user)

    def get_object(self) -> Clique:
        uuid, _, clique_id = self.kwargs["label"].rpartition(".")
        obj = None
        if uuid and clique_id.isdigit():
            obj = self.get_queryset().filter(cluster_uuid=uuid, clique_id=int(clique_id)).first()
        if obj is None:
            raise NotFound(f"no clique labelled {self.kwargs['label']!r}")
        return obj


_NODE_ACTION: dict[str, Any] = {
    "permission_classes": [IsAuthenticated, TokenScope, IsOperator],
    "serializer_class": ReasonSerializer,
}


class NodeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """Compute trays. Tenants see which trays are in use, but only their own domains' names."""

    serializer_class = NodeSerializer
    lookup_field = "hostname"
    lookup_value_regex = "[^/]+"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Node]:
        return nodes_with_holders(user)

    def _act(self, request: Request, service: Any) -> Response:
        node = self.get_object()
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        service(actor=self.actor, node=node, reason=body.validated_data["reason"])
        node = refreshed(node, self.get_queryset())
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Cordon a tray: no new domains are placed on it.",
    )
    @action(detail=True, methods=["post"], **_NODE_ACTION)
    def cordon(self, request: Request, hostname: str) -> Response:
        return self._act(request, node_cordon)

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Uncordon a tray: it takes new domains again.",
    )
    @action(detail=True, methods=["post"], **_NODE_ACTION)
    def uncordon(self, request: Request, hostname: str) -> Response:
        return self._act(request, node_uncordon)

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Drain a tray: no new domains; its current domain runs until released.",
    )
    @action(detail=True, methods=["post"], **_NODE_ACTION)
    def drain(self, request: Request, hostname: str) -> Response:
        return self._act(request, node_drain)
