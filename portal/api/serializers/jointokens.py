"""Join tokens as the API shows them: never the secret, except once in the create answer."""

from __future__ import annotations

from rest_framework import serializers

from domains.agents.jointokens import DEFAULT_EXPIRY, MAX_EXPIRY, join_token_state
from domains.agents.models import JoinToken
from portal.api.serializers.common import StrictCharField, StrictSerializer


class JoinTokenSerializer(serializers.ModelSerializer):
    state = serializers.SerializerMethodField(
        help_text="`usable`, `expired`, `used up` or `revoked`: whether an agent may join now."
    )
    expiresAt = serializers.DateTimeField(
        source="expires_at", allow_null=True, help_text="When it stops working; null: never."
    )
    maxUses = serializers.IntegerField(
        source="max_uses", allow_null=True, help_text="Trays it may register; null: no limit."
    )
    createdBy = serializers.CharField(
        source="created_by.username",
        allow_null=True,
        default=None,
        help_text="Who minted it; null: made on the server.",
    )
    createdAt = serializers.DateTimeField(source="created_at", help_text="When it was minted.")
    revokedAt = serializers.DateTimeField(
        source="revoked_at", allow_null=True, help_text="When it was revoked, or null."
    )

    class Meta:
        model = JoinToken
        fields = [
            "id",
            "name",
            "state",
            "expiresAt",
            "uses",
            "maxUses",
            "createdBy",
            "createdAt",
            "revokedAt",
        ]
        extra_kwargs = {
            "id": {"help_text": "Revoke it with DELETE /api/v1/jointokens/{id}/."},
            "name": {"help_text": "What it is for, e.g. the rack installed."},
            "uses": {"help_text": "Trays registered with it so far."},
        }

    def get_state(self, token: JoinToken) -> str:
        return join_token_state(token)


class NewJoinTokenSerializer(JoinTokenSerializer):
    token = serializers.CharField(help_text="The secret. Shown only in this answer.")

    class Meta(JoinTokenSerializer.Meta):
        fields = [*JoinTokenSerializer.Meta.fields, "token"]


class JoinTokenInput(StrictSerializer):
    name = StrictCharField(max_length=100, help_text="What it is for, e.g. the rack installed.")
    expiresInHours = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=int(MAX_EXPIRY.total_seconds() // 3600),
        default=int(DEFAULT_EXPIRY.total_seconds() // 3600),
        help_text="It stops working after this many hours. Default: 24.",
    )
    maxUses = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**31 - 1,
        default=None,
        help_text="Trays it may register; none for no limit.",
    )
