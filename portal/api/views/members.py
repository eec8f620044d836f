"""Members of a namespace: everyone who can see the namespace reads the roster; namespace
admins (and portal admins) add people, change roles and remove them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from domains.tenancy.models import Membership
from domains.tenancy.selectors import Viewer, can_admin_namespace, members_of, user_named
from domains.tenancy.services import membership_remove, membership_set
from portal.api.base import NamespacedViewSet
from portal.api.schema import NAMESPACE_HELP, WRITE, errors
from portal.api.serializers.tenancy import MembershipInput, MembershipSerializer


@extend_schema(
    parameters=[
        OpenApiParameter(
            "namespace", OpenApiTypes.STR, OpenApiParameter.PATH, description=NAMESPACE_HELP
        )
    ],
    tags=["members"],
)
class MemberViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, NamespacedViewSet):
    """A namespace's members and their roles: everyone who can see the namespace reads the
    roster; its admins (and portal admins) add people, change roles and remove them."""

    serializer_class = MembershipSerializer
    lookup_field = "user__username"
    lookup_url_kwarg = "username"
    lookup_value_regex = "[^/]+"

    def scoped_queryset(self, user: Viewer) -> QuerySet[Membership]:
        if getattr(self, "swagger_fake_view", False):
            return Membership.objects.none()
        return members_of(self.namespace)

    @extend_schema(summary="The namespace's members and their roles.")
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(summary="One member's role.")
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    def _require_admin(self) -> None:
        if not can_admin_namespace(self.request.user, self.namespace):
            raise PermissionDenied(f"Only admins of {self.namespace.name!r} manage its members.")

    @extend_schema(
        request=MembershipInput,
        responses={200: MembershipSerializer, **errors(*WRITE)},
        summary="Add the user to the namespace, or change their role.",
    )
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self._require_admin()
        body = MembershipInput(data=request.data)
        body.is_valid(raise_exception=True)
        user = user_named(self.kwargs["username"])
        membership = membership_set(
            actor=self.actor, namespace=self.namespace, user=user, role=body.validated_data["role"]
        )
        membership = self.get_queryset().get(pk=membership.pk)
        return Response(MembershipSerializer(membership).data)

    @extend_schema(responses={204: None, **errors(*WRITE)}, summary="Remove from the namespace.")
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self._require_admin()
        membership = self.get_object()
        membership_remove(actor=self.actor, namespace=self.namespace, user=membership.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
