"""ComputeDomains under namespaces/{namespace}/computedomains/, and admins' approvals."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from domains.computedomains import services
from domains.computedomains.failover import domain_tray_replace
from domains.computedomains.models import ComputeDomain, DomainSource, Phase
from domains.computedomains.selectors import (
    approvals_visible_to,
    domain_by_name,
    domains_with_members,
    events_visible_to,
)
from domains.errors import InvalidInput
from domains.kube.manifests import parse_replicas, workload_manifests
from domains.tenancy.selectors import Viewer, can_request_in, is_operator
from portal.api import examples
from portal.api.base import NamespacedViewSet, ScopedViewSet, call_service, refreshed
from portal.api.permissions import IsPortalAdmin
from portal.api.schema import NAMESPACE_HELP, READ, WRITE, errors
from portal.api.serializers.common import ReasonSerializer
from portal.api.serializers.domains import (
    SPEC_FIELD_PATHS,
    ComputeDomainInput,
    ComputeDomainSerializer,
    ExtendInput,
    ManifestsSerializer,
)
from portal.api.serializers.dryrun import DryRunSerializer
from portal.api.serializers.replace import ReplaceInput
from portal.api.serializers.tenancy import EventSerializer

DRY_RUN = OpenApiParameter(
    "dryRun",
    OpenApiTypes.STR,
    enum=["All"],
    description="`All`: validate and answer where it would land (or why not); create nothing.",
)
PHASE_FILTER = OpenApiParameter(
    "phase", OpenApiTypes.STR, enum=[p.value for p in Phase], description="Only this phase."
)


@extend_schema(
    parameters=[
        OpenApiParameter(
            "namespace", OpenApiTypes.STR, OpenApiParameter.PATH, description=NAMESPACE_HELP
        ),
    ],
    tags=["computedomains"],
)
class ComputeDomainViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, NamespacedViewSet
):
    """A namespace's ComputeDomains, shaped like `resource.nvidia.com/v1beta1` objects.

    Viewers read; members and namespace admins create, extend and release (DELETE).
    """

    serializer_class = ComputeDomainSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def scoped_queryset(self, user: Viewer) -> QuerySet[ComputeDomain]:
        if getattr(self, "swagger_fake_view", False):
            return ComputeDomain.objects.none()
        qs = domains_with_members(user, self.namespace).select_related("placement_estimate")
        phase = self.request.query_params.get("phase") if self.action == "list" else None
        return qs.filter(phase=phase) if phase else qs

    def get_object(self) -> ComputeDomain:
        return domain_by_name(self.request.user, self.namespace, self.kwargs["name"])

    def _target(self) -> ComputeDomain:
        """The domain a write acts on: the service locks and re-reads it, and the answer
        is rendered from a fresh read (`_render`), so its members are not read here."""
        return domain_by_name(self.request.user, self.namespace, self.kwargs["name"], members=False)

    def _require_member(self) -> None:
        if not can_request_in(self.request.user, self.namespace):
            raise PermissionDenied(
                f"Only members of {self.namespace.name!r} may request or release its domains."
            )

    def _render(self, domain: ComputeDomain, status_code: int = 200) -> Response:
        domain = refreshed(domain, self.get_queryset())
        body = ComputeDomainSerializer(domain, context=self.get_serializer_context()).data
        return Response(body, status=status_code)

    @extend_schema(
        parameters=[PHASE_FILTER],
        summary="List the namespace's domains, newest first.",
        examples=examples.LIST,
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(summary="Read one domain: its spec and status.", examples=examples.RETRIEVE)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(
        request=ComputeDomainInput,
        parameters=[DRY_RUN],
        responses={
            201: ComputeDomainSerializer,
            200: OpenApiResponse(DryRunSerializer, description="With `?dryRun=All`."),
            **errors(*WRITE),
        },
        summary="Request a domain (a NVIDIA ComputeDomain manifest as JSON works).",
        examples=examples.CREATE,
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self._require_member()
        body = ComputeDomainInput(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        spec = body.to_spec()
        dry_run = request.query_params.get("dryRun")
        if dry_run is not None:
            if dry_run != "All":
                raise InvalidInput("dryRun: the only accepted value is All", field="dryRun")
            result = call_service(
                services.domain_dry_run,
                api_names=SPEC_FIELD_PATHS,
                in_message=True,  # `spec.numNodes: must be …`
                namespace=self.namespace,
                spec=spec,
                requested_by=self.actor.user,
            )
            return Response(DryRunSerializer(result).data)
        domain = call_service(
            services.domain_request,
            api_names=SPEC_FIELD_PATHS,
            in_message=True,
            actor=self.actor,
            namespace=self.namespace,
            spec=spec,
            source=DomainSource.API,
        )
        return self._render(domain, status.HTTP_201_CREATED)

    @extend_schema(
        responses={202: ComputeDomainSerializer, **errors(*WRITE)},
        summary="Release the domain (idempotent); it is Released once every tray is clean.",
        examples=examples.RELEASE,
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        domain = self._target()
        self._require_member()
        domain = services.domain_release(actor=self.actor, domain=domain, reason="released via API")
        return self._render(domain, status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=ExtendInput,
        responses={200: ComputeDomainSerializer, **errors(*WRITE)},
        summary="Extend the domain's lease.",
        examples=examples.EXTEND,
    )
    @action(detail=True, methods=["post"], serializer_class=ExtendInput)
    def extend(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        domain = self._target()
        self._require_member()
        body = ExtendInput(data=request.data)
        body.is_valid(raise_exception=True)
        domain = services.domain_extend_lease(
            actor=self.actor, domain=domain, by=body.validated_data["by"]
        )
        return self._render(domain)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "replicas",
                {"type": "integer", "minimum": 1},
                description=(
                    "Pods to run, for a domain that follows its workload (numNodes 0) only, "
                    "one per tray: 1 to the trays of its cliques (and the namespace's quota). "
                    "Up to its largest clique's count they must share one NVLink clique; "
                    "more fill as few of its cliques as the scheduler finds. Default: the "
                    "trays it holds now, else its largest clique's count."
                ),
            )
        ],
        responses={200: ManifestsSerializer, **errors(*READ, 409)},
        summary="Workload manifests (Deployment, Job, MPIJob) pinned to the domain's trays.",
        examples=examples.MANIFESTS_EXAMPLES,
    )
    @action(detail=True, methods=["get"], serializer_class=ManifestsSerializer)
    def manifests(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        replicas = parse_replicas(request.query_params.getlist("replicas"))
        manifests = workload_manifests(self.get_object(), replicas=replicas)
        return Response(ManifestsSerializer(manifests).data)

    @extend_schema(
        request=ReplaceInput,
        responses={200: ComputeDomainSerializer, **errors(*WRITE)},
        summary="Operators: replace a tray of a placed domain with a free one of its clique.",
        examples=examples.REPLACE,
    )
    @action(detail=True, methods=["post"], serializer_class=ReplaceInput)
    def replace(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        domain = self._target()
        if not is_operator(request.user):
            raise PermissionDenied("only operators replace a domain's trays")
        body = ReplaceInput(data=request.data)
        body.is_valid(raise_exception=True)
        domain_tray_replace(
            actor=self.actor,
            domain=domain,
            tray=body.validated_data["tray"],
            with_=body.validated_data["with"],
        )
        return self._render(domain)

    @extend_schema(
        responses={200: EventSerializer(many=True), **errors(*READ)},
        summary="The domain's timeline, newest first.",
        examples=examples.EVENTS,
    )
    @action(detail=True, methods=["get"], serializer_class=EventSerializer)
    def events(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        domain = self.get_object()
        page = self.paginate_queryset(events_visible_to(request.user).filter(domain=domain))
        return self.get_paginated_response(EventSerializer(page, many=True).data)


class ApprovalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """Requests above a namespace's approval threshold, waiting for a portal admin."""

    serializer_class = ComputeDomainSerializer
    permission_classes = [*ScopedViewSet.permission_classes, IsPortalAdmin]
    lookup_field = "uid"
    lookup_value_regex = "[0-9a-f-]{36}"

    def scoped_queryset(self, user: Viewer) -> QuerySet[ComputeDomain]:
        return approvals_visible_to(user)

    @extend_schema(summary="Requests waiting for approval.", examples=examples.APPROVALS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(summary="Read one waiting request.", examples=examples.APPROVALS)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    def _render(self, domain: ComputeDomain) -> Response:
        domain = refreshed(domain, domains_with_members(self.request.user, domain.namespace))
        return Response(ComputeDomainSerializer(domain, context=self.get_serializer_context()).data)

    @extend_schema(
        request=None,
        responses={200: ComputeDomainSerializer, **errors(*WRITE)},
        summary="Approve: the domain goes on to placement.",
        examples=examples.APPROVE,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, uid: str) -> Response:
        domain = services.domain_approve(actor=self.actor, domain=self.get_object())
        return self._render(domain)

    @extend_schema(
        request=ReasonSerializer,
        responses={200: ComputeDomainSerializer, **errors(*WRITE)},
        summary="Deny: the domain fails with the reason given.",
        examples=examples.DENY,
    )
    @action(detail=True, methods=["post"], serializer_class=ReasonSerializer)
    def deny(self, request: Request, uid: str) -> Response:
        domain = self.get_object()
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        domain = services.domain_deny(
            actor=self.actor, domain=domain, reason=body.validated_data["reason"]
        )
        return self._render(domain)
