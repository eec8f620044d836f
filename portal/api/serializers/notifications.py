"""Subscriptions, their delivery log and the in-app inbox: always the caller's own."""

from __future__ import annotations

from rest_framework import serializers

from domains.notifications.models import Channel, Kind, Notification, Status, Subscription
from portal.api.serializers.common import StrictCharField, StrictSerializer


class SubscriptionSerializer(serializers.ModelSerializer):
    channel = serializers.ChoiceField(choices=Channel.choices)
    kinds = serializers.ListField(child=serializers.ChoiceField(choices=Kind.choices))
    namespace = serializers.CharField(source="namespace.name", allow_null=True, default=None)
    leaseWarningHours = serializers.IntegerField(source="lease_warning_hours")
    maintenanceWarningHours = serializers.IntegerField(source="maintenance_warning_hours")
    secret = serializers.CharField(
        help_text="Webhooks: the HMAC-SHA256 signing key (shown to the owner only)."
    )
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = Subscription
        fields = ["id", "channel", "target", "kinds", "namespace", "leaseWarningHours"]
        fields += ["maintenanceWarningHours", "active", "secret", "createdAt"]


class SubscriptionInput(StrictSerializer):
    channel = serializers.ChoiceField(choices=Channel.choices)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=Kind.choices), min_length=1, max_length=20
    )
    target = StrictCharField(required=False, allow_blank=True, max_length=500, default="")
    namespace = StrictCharField(required=False, allow_blank=True, max_length=63, default="")
    leaseWarningHours = serializers.IntegerField(required=False, default=4)
    maintenanceWarningHours = serializers.IntegerField(required=False, default=24)


class AttemptSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    statusCode = serializers.IntegerField(source="status_code", allow_null=True)
    error = serializers.CharField()
    durationMs = serializers.IntegerField(source="duration_ms")


class NotificationSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=Kind.choices)
    namespace = serializers.CharField(source="namespace.name", allow_null=True, default=None)
    status = serializers.ChoiceField(choices=Status.choices)
    lastError = serializers.CharField(source="last_error")
    createdAt = serializers.DateTimeField(source="created_at")
    deliveredAt = serializers.DateTimeField(source="delivered_at", allow_null=True)
    readAt = serializers.DateTimeField(source="read_at", allow_null=True)

    class Meta:
        model = Notification
        fields = ["id", "kind", "title", "body", "url", "namespace", "status", "attempts"]
        fields += ["lastError", "createdAt", "deliveredAt", "readAt"]


class DeliverySerializer(NotificationSerializer):
    """A delivery log line: the notification and every try at sending it."""

    tries = AttemptSerializer(source="delivery_attempts.all", many=True)

    class Meta(NotificationSerializer.Meta):
        fields = [*NotificationSerializer.Meta.fields, "tries"]


class MarkReadInput(StrictSerializer):
    ids = serializers.ListField(
        # An id is a BigAutoField: past 2**63 - 1 the database refuses it (a 500).
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        max_length=1000,
    )
