"""Racks, cliques, trays, NVLink switch trays and power shelves: read by everyone signed
in, each with its blast radius (what losing it would hit, as far as the caller may see);
tray and part actions for operators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer, Serializer

from domains.agents.joining import node_allow_rejoin
from domains.computedomains.fabric import (
    cliques_with_occupancy,
    nodes_with_holders,
    power_shelves_visible_to,
    racks_with_occupancy,
    switch_trays_visible_to,
)
from domains.computedomains.trays import tray_act
from domains.foresight.blast import (
    Scope,
    blast_radius_for,
    clique_scope,
    power_shelf_scope,
    rack_scope,
    switch_tray_scope,
    tray_scope,
)
from domains.foresight.maintenance import (
    maintenance_cancel,
    maintenance_schedule,
    window_for,
    window_views,
    windows_visible_to,
)
from domains.inventory.models import Clique, MaintenanceWindow, Node, PowerShelf, Rack, SwitchTray
from domains.inventory.services import (
    node_accept,
    power_shelf_set_state,
    switch_tray_set_state,
)
from domains.tenancy.selectors import Viewer, visible_namespace_ids
from portal.api.base import ScopedViewSet, refreshed
from portal.api.permissions import IsOperator, TokenScope
from portal.api.schema import READ, WRITE, errors
from portal.api.serializers.common import AcceptSerializer, ReasonSerializer
from portal.api.serializers.fabric import (
    CliqueSerializer,
    NodeDetailSerializer,
    NodeSerializer,
    RackSerializer,
)
from portal.api.serializers.foresight import (
    BlastRadiusSerializer,
    MaintenanceWindowInput,
    MaintenanceWindowSerializer,
    PartStateInput,
    PowerShelfSerializer,
    SwitchTraySerializer,
)

BLAST_RADIUS = extend_schema(
    responses={200: BlastRadiusSerializer, **errors(*READ)},
    summary="What losing it (down, or drained for service) would hit: domains, tenants, GPUs.",
)


class BlastRadiusMixin:
    """`GET …/<object>/blast-radius`: the object's blast radius as the caller may see it."""

    def scope_of(self, obj: Any) -> Scope:
        raise NotImplementedError(f"{type(self).__name__} must say what its objects' scope is")

    @BLAST_RADIUS
    @action(
        detail=True,
        methods=["get"],
        url_path="blast-radius",
        serializer_class=BlastRadiusSerializer,
    )
    def blast_radius(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()  # type: ignore[attr-defined]  # the viewset's, after this mixin
        radius = blast_radius_for(request.user, self.scope_of(obj))
        return Response(BlastRadiusSerializer(radius).data)


class RackViewSet(
    BlastRadiusMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet
):
    """NVLink racks with tray counts."""

    serializer_class = RackSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Rack]:
        return racks_with_occupancy(user)

    def scope_of(self, obj: Rack) -> Scope:
        return rack_scope(obj)


class CliqueViewSet(
    BlastRadiusMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet
):
    """NVLink partitions (`<cluster_uuid>.<clique_id>`): a domain never spans two."""

    serializer_class = CliqueSerializer
    lookup_value_regex = "[^/]+"
    lookup_url_kwarg = "label"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Clique]:
        return cliques_with_occupancy(user)

    def scope_of(self, obj: Clique) -> Scope:
        return clique_scope(obj)

    def get_object(self) -> Clique:
        uuid, _, clique_id = self.kwargs["label"].rpartition(".")
        obj = None
        if uuid and (clique_id.isascii() and clique_id.isdigit()):
            obj = self.get_queryset().filter(cluster_uuid=uuid, clique_id=int(clique_id)).first()
        if obj is None:
            raise NotFound(f"no clique labelled {self.kwargs['label']!r}")
        return obj


OPERATORS = [IsAuthenticated, TokenScope, IsOperator]  # an action's permission classes
_NODE_ACTION: dict[str, Any] = {
    "permission_classes": OPERATORS,
    "serializer_class": ReasonSerializer,
}


class NodeViewSet(
    BlastRadiusMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet
):
    """Compute trays. Tenants see which trays are in use, but only their own domains' names."""

    serializer_class = NodeSerializer
    lookup_field = "hostname"
    lookup_value_regex = "[^/]+"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Node]:
        return nodes_with_holders(user)

    def scope_of(self, obj: Node) -> Scope:
        return tray_scope(obj)

    def get_serializer_class(self) -> type[BaseSerializer[Node]]:
        if self.action == "retrieve":
            return NodeDetailSerializer
        return super().get_serializer_class()

    def get_serializer_context(self) -> dict[str, Any]:
        # Only trays name other namespaces' domains: a query no other endpoint pays for.
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["visible_namespace_ids"] = visible_namespace_ids(self.request.user)
        return context

    def _act(self, request: Request, action: str) -> Response:
        """One tray action; a no-op, or marking down a tray whose domain runs, is a 409."""
        node = self.get_object()
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tray_act(actor=self.actor, node=node, action=action, reason=body.validated_data["reason"])
        node = refreshed(node, self.get_queryset())
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Cordon a tray: no new domains are placed on it.",
    )
    @action(detail=True, methods=["post"], **_NODE_ACTION)
    def cordon(self, request: Request, hostname: str) -> Response:
        return self._act(request, "cordon")

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Uncordon a tray: it takes new domains again.",
    )
    @action(detail=True, methods=["post"], **_NODE_ACTION)
    def uncordon(self, request: Request, hostname: str) -> Response:
        return self._act(request, "uncordon")

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Drain a tray: no new domains; its current domain runs until released.",
    )
    @action(detail=True, methods=["post"], **_NODE_ACTION)
    def drain(self, request: Request, hostname: str) -> Response:
        return self._act(request, "drain")

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Mark a tray down: it is dead. A running domain on it turns Degraded, so a "
        "tray whose domain runs is drained first (409 otherwise).",
    )
    @action(detail=True, methods=["post"], url_path="mark-down", **_NODE_ACTION)
    def mark_down(self, request: Request, hostname: str) -> Response:
        return self._act(request, "mark_down")

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Mark a tray that was down up again: ready once its agent reports.",
    )
    @action(detail=True, methods=["post"], url_path="mark-up", **_NODE_ACTION)
    def mark_up(self, request: Request, hostname: str) -> Response:
        return self._act(request, "mark_up")

    @extend_schema(
        request=ReasonSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Allow the tray's next agent join (within an hour) to re-register it: a new "
        "node token, and new identity facts (clique, GPUs, IP) if it reports them.",
    )
    @action(detail=True, methods=["post"], url_path="allow-rejoin", **_NODE_ACTION)
    def allow_rejoin(self, request: Request, hostname: str) -> Response:
        node = self.get_object()
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node_allow_rejoin(actor=self.actor, node=node, reason=body.validated_data["reason"])
        node = refreshed(node, self.get_queryset())
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)

    @extend_schema(
        request=AcceptSerializer,
        responses={200: NodeSerializer, **errors(*WRITE)},
        summary="Accept a tray that joined unknown (pending) into a rack's compute slot: it "
        "is placeable from then on. 400 naming the field for an unknown rack, a slot outside "
        "its compute slots or one another tray holds; 409 for a tray not pending.",
    )
    @action(
        detail=True,
        methods=["post"],
        permission_classes=OPERATORS,
        serializer_class=AcceptSerializer,
    )
    def accept(self, request: Request, hostname: str) -> Response:
        node = self.get_object()
        body = AcceptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node_accept(actor=self.actor, node=node, **body.validated_data)
        node = refreshed(node, self.get_queryset())
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)


_Part = TypeVar("_Part", SwitchTray, PowerShelf)  # a rack part without an agent
# A class decorator (drf-spectacular's are typed for any callable).
_Decorated = TypeVar("_Decorated", bound=Callable[..., Any])


def part_state_schema(
    noun: str, serializer: type[Serializer]
) -> Callable[[_Decorated], _Decorated]:
    """The `state` action's schema for one kind of rack part."""
    return extend_schema_view(
        state=extend_schema(
            request=PartStateInput,
            responses={200: serializer, **errors(*WRITE)},
            summary=f"Record that the {noun} is down (failed or out for service) or back.",
        )
    )


class PartViewSet(
    BlastRadiusMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ScopedViewSet,
    Generic[_Part],
):
    """A kind of rack part without an agent, by name: read by everyone signed in, its state
    recorded by operators. A subclass says which kind: its serializer (and
    `part_state_schema`), who sees which, its blast-radius scope and its state service."""

    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def set_state(self, part: _Part, *, state: str, reason: str) -> _Part:
        raise NotImplementedError(f"{type(self).__name__} must say how a part's state is set")

    @action(detail=True, methods=["post"], permission_classes=OPERATORS)
    def state(self, request: Request, name: str) -> Response:
        body = PartStateInput(data=request.data)
        body.is_valid(raise_exception=True)
        part = self.set_state(self.get_object(), **body.validated_data)
        return Response(self.get_serializer(refreshed(part, self.get_queryset())).data)


@part_state_schema("switch tray", SwitchTraySerializer)
class SwitchTrayViewSet(PartViewSet[SwitchTray]):
    """NVLink switch trays (nine per GB200 NVL72 rack). Losing one slows every domain of
    its rack; operators record when one is down or back."""

    serializer_class = SwitchTraySerializer

    def scoped_queryset(self, user: Viewer) -> QuerySet[SwitchTray]:
        return switch_trays_visible_to(user)

    def scope_of(self, obj: SwitchTray) -> Scope:
        return switch_tray_scope(obj)

    def set_state(self, part: SwitchTray, *, state: str, reason: str) -> SwitchTray:
        return switch_tray_set_state(actor=self.actor, tray=part, state=state, reason=reason)


@part_state_schema("power shelf", PowerShelfSerializer)
class PowerShelfViewSet(PartViewSet[PowerShelf]):
    """Power shelves (eight per GB200 NVL72 rack, all feeding its busbar). Losing one costs
    redundancy until the rest cannot carry the rack; operators record when one is down."""

    serializer_class = PowerShelfSerializer

    def scoped_queryset(self, user: Viewer) -> QuerySet[PowerShelf]:
        return power_shelves_visible_to(user)

    def scope_of(self, obj: PowerShelf) -> Scope:
        return power_shelf_scope(obj)

    def set_state(self, part: PowerShelf, *, state: str, reason: str) -> PowerShelf:
        return power_shelf_set_state(actor=self.actor, shelf=part, state=state, reason=reason)


class MaintenanceWindowViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, ScopedViewSet
):
    """Planned maintenance of trays, a clique or a rack. Everyone signed in reads them (with
    the domains already there, other tenants' only counted); operators schedule and cancel.
    Placement keeps new domains whose lease would reach into a window off its trays, and a
    lease is not extended into one."""

    serializer_class = MaintenanceWindowSerializer
    permission_classes = [IsAuthenticated, TokenScope]

    def get_permissions(self) -> list[Any]:
        if self.action in ("create", "cancel"):
            return [IsAuthenticated(), TokenScope(), IsOperator()]
        return list(super().get_permissions())

    def scoped_queryset(self, user: Viewer) -> QuerySet[MaintenanceWindow]:
        past = self.request.query_params.get("past") == "true"
        return windows_visible_to(user, include_past=past)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        views = window_views(request.user, page or [])
        return self.get_paginated_response(MaintenanceWindowSerializer(views, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        window = window_for(request.user, self._pk())
        return Response(MaintenanceWindowSerializer(window_views(request.user, [window])[0]).data)

    def _pk(self) -> int:
        raw = str(self.kwargs.get("pk", ""))
        if not (raw.isascii() and raw.isdigit()):
            raise NotFound(f"no maintenance window {raw!r}")
        return int(raw)

    @extend_schema(
        request=MaintenanceWindowInput,
        responses={201: MaintenanceWindowSerializer, **errors(*WRITE)},
        summary="Schedule maintenance of trays, a clique or a rack (operators).",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        window = self.call_with_body(MaintenanceWindowInput, maintenance_schedule, actor=self.actor)
        window = window_for(request.user, window.pk)
        body_out = MaintenanceWindowSerializer(window_views(request.user, [window])[0]).data
        return Response(body_out, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=None,
        responses={200: MaintenanceWindowSerializer, **errors(*WRITE)},
        summary="Call a window off (operators); its trays are placeable again.",
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        window = maintenance_cancel(actor=self.actor, window=window_for(request.user, self._pk()))
        window = window_for(request.user, window.pk)
        return Response(MaintenanceWindowSerializer(window_views(request.user, [window])[0]).data)
