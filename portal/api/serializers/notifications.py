"""Subscriptions, their delivery log and the in-app inbox: always the caller's own."""

from __future__ import annotations

from rest_framework import serializers

from domains.notifications.models import Channel, Kind, Notification, Status, Subscription
from portal.api.serializers.common import StrictCharField, StrictSerializer

CHANNEL_HELP = "`in_app` (the inbox), `email` or a signed `webhook`."
KINDS_HELP = "The kinds of events it sends."
NAMESPACE_HELP = "Only events of this namespace; empty: every namespace you can see."
LEASE_HELP = "`lease.ending` is sent this many hours before a lease ends."
MAINTENANCE_HELP = "Maintenance is announced this many hours before it starts."


class SubscriptionSerializer(serializers.ModelSerializer):
    channel = serializers.ChoiceField(choices=Channel.choices, help_text=CHANNEL_HELP)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=Kind.choices), help_text=KINDS_HELP
    )
    namespace = serializers.CharField(
        source="namespace.name", allow_null=True, default=None, help_text=NAMESPACE_HELP
    )
    leaseWarningHours = serializers.IntegerField(source="lease_warning_hours", help_text=LEASE_HELP)
    maintenanceWarningHours = serializers.IntegerField(
        source="maintenance_warning_hours", help_text=MAINTENANCE_HELP
    )
    secret = serializers.CharField(
        help_text="Webhooks: the HMAC-SHA256 signing key (shown to the owner only)."
    )
    createdAt = serializers.DateTimeField(source="created_at", help_text="When it was made.")

    class Meta:
        model = Subscription
        fields = ["id", "channel", "target", "kinds", "namespace", "leaseWarningHours"]
        fields += ["maintenanceWarningHours", "active", "secret", "createdAt"]
        extra_kwargs = {
            "id": {"help_text": "Its delivery log: GET /api/v1/subscriptions/{id}/deliveries/."},
            "active": {"help_text": "Whether it sends."},
        }


class SubscriptionInput(StrictSerializer):
    channel = serializers.ChoiceField(choices=Channel.choices, help_text=CHANNEL_HELP)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=Kind.choices),
        min_length=1,
        max_length=20,
        help_text=KINDS_HELP,
    )
    target = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=500,
        default="",
        help_text="E-mail: the address (default: your account's); webhook: the URL.",
    )
    namespace = StrictCharField(
        required=False, allow_blank=True, max_length=63, default="", help_text=NAMESPACE_HELP
    )
    leaseWarningHours = serializers.IntegerField(
        source="lease_warning_hours",
        required=False,
        default=4,
        help_text=LEASE_HELP + " Default: 4.",
    )
    maintenanceWarningHours = serializers.IntegerField(
        source="maintenance_warning_hours",
        required=False,
        default=24,
        help_text=MAINTENANCE_HELP + " Default: 24.",
    )


class AttemptSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When it was tried.")
    statusCode = serializers.IntegerField(
        source="status_code", allow_null=True, help_text="The webhook's HTTP status, or null."
    )
    error = serializers.CharField(help_text="What went wrong; empty when it went through.")
    durationMs = serializers.IntegerField(source="duration_ms", help_text="How long it took.")


class NotificationSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=Kind.choices, help_text="What it is about.")
    namespace = serializers.CharField(
        source="namespace.name", allow_null=True, default=None, help_text="Its namespace, if any."
    )
    status = serializers.ChoiceField(
        choices=Status.choices, help_text="Its delivery: pending, sending, delivered or failed."
    )
    lastError = serializers.CharField(
        source="last_error", help_text="Why the last try failed; empty if none did."
    )
    createdAt = serializers.DateTimeField(source="created_at", help_text="When it was made.")
    deliveredAt = serializers.DateTimeField(
        source="delivered_at", allow_null=True, help_text="When it was delivered, or null."
    )
    readAt = serializers.DateTimeField(
        source="read_at", allow_null=True, help_text="When you read it (in-app), or null."
    )

    class Meta:
        model = Notification
        fields = ["id", "kind", "title", "body", "url", "namespace", "status", "attempts"]
        fields += ["lastError", "createdAt", "deliveredAt", "readAt"]
        extra_kwargs = {
            "id": {"help_text": "Mark it read with POST /api/v1/notifications/read/."},
            "title": {"help_text": "One line."},
            "body": {"help_text": "The rest, in words."},
            "url": {"help_text": "The portal page it is about."},
            "attempts": {"help_text": "Tries at delivering it so far."},
        }


class DeliverySerializer(NotificationSerializer):
    """A delivery log line: the notification and every try at sending it."""

    tries = AttemptSerializer(
        source="delivery_attempts.all", many=True, help_text="Every try, oldest first."
    )

    class Meta(NotificationSerializer.Meta):
        fields = [*NotificationSerializer.Meta.fields, "tries"]


class MarkReadInput(StrictSerializer):
    ids = serializers.ListField(
        # An id is a BigAutoField: past 2**63 - 1 the database refuses it (a 500).
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        max_length=1000,
        help_text="The notifications to mark read; left out: all of yours.",
    )
