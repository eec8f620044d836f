"""The caller's own subscriptions (with each one's delivery log) and in-app inbox. Nobody
lists, reads or removes anybody else's: another user's id answers 404."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from domains.notifications.models import Notification, Subscription
from domains.notifications.selectors import (
    delivery_log,
    inbox_of,
    subscription_of,
    subscriptions_of,
)
from domains.notifications.services import (
    notifications_mark_read,
    subscription_create,
    subscription_delete,
)
from domains.tenancy.selectors import Viewer
from portal.api.base import ScopedViewSet
from portal.api.schema import READ, WRITE, errors
from portal.api.serializers.notifications import (
    DeliverySerializer,
    MarkReadInput,
    NotificationSerializer,
    SubscriptionInput,
    SubscriptionSerializer,
)
from portal.api.throttles import SubscriptionCreateRate


class SubscriptionViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    """Your subscriptions: which events (domain Ready, Degraded, Failed, lease ending,
    approval asked or decided, maintenance) reach you in the portal, by e-mail or by a
    signed webhook. Only events of namespaces you may see when they happen are sent."""

    throttle_classes = [SubscriptionCreateRate]  # 429 past PORTAL_SUBSCRIPTION_CREATES_PER_MIN

    serializer_class = SubscriptionSerializer

    def scoped_queryset(self, user: Viewer) -> QuerySet[Subscription]:
        return subscriptions_of(user)

    def get_object(self) -> Subscription:
        raw = str(self.kwargs.get("pk", ""))
        # isascii: "³".isdigit() is true, and int("³") a ValueError (a 500 schemathesis found).
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
            raise NotFound(f"no subscription {raw!r}")
        return subscription_of(self.request.user, int(raw))

    @extend_schema(
        request=SubscriptionInput,
        responses={201: SubscriptionSerializer, **errors(*WRITE)},
        summary="Subscribe to some kinds of events over one channel.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        created = self.call_with_body(
            SubscriptionInput, subscription_create, user=self.signed_in_user
        )
        return Response(SubscriptionSerializer(created).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Subscription) -> None:
        subscription_delete(subscription=instance)

    @extend_schema(
        responses={200: DeliverySerializer(many=True), **errors(*READ)},
        summary="The delivery log, newest first: the notifications sent, with every try.",
    )
    @action(detail=True, methods=["get"], serializer_class=DeliverySerializer)
    def deliveries(self, request: Request, pk: str) -> Response:
        # Paged like every list (the schema said so; it was a bare list of the latest 50).
        page = self.paginate_queryset(delivery_log(self.get_object()))
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)


class NotificationViewSet(mixins.ListModelMixin, ScopedViewSet):
    """Your in-app notifications, newest first."""

    serializer_class = NotificationSerializer

    def scoped_queryset(self, user: Viewer) -> QuerySet[Notification]:
        qs = inbox_of(user)
        if self.request.query_params.get("unread") == "true":
            qs = qs.filter(read_at__isnull=True)
        return qs

    @extend_schema(
        request=MarkReadInput,
        responses={200: None, **errors(*WRITE)},
        summary="Mark your notifications read (those named in `ids`, or all).",
    )
    @action(detail=False, methods=["post"], serializer_class=MarkReadInput)
    def read(self, request: Request) -> Response:
        body = MarkReadInput(data=request.data)
        body.is_valid(raise_exception=True)
        count = notifications_mark_read(
            user=self.signed_in_user, ids=body.validated_data.get("ids")
        )
        return Response({"marked": count})
