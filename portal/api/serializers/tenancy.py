"""Namespaces, quotas, API tokens and the audit log."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from domains.audit.models import ActorKind, Event
from domains.tenancy.models import ApiToken, Membership, Namespace, NamespaceSource, Quota, Role
from portal.api.serializers.common import (
    DurationField,
    LabelsField,
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
)

QUOTA_FIELDS = {  # API name → Quota field
    "maxGpus": "max_gpus",
    "maxNodes": "max_nodes",
    "maxDomains": "max_domains",
    "maxNodesPerDomain": "max_nodes_per_domain",
    "maxLifetime": "max_lifetime",
    "approvalAboveNodes": "approval_above_nodes",
}
LIMIT_MAX = 1_000_000


class NamespaceSerializer(serializers.ModelSerializer):
    displayName = serializers.CharField(source="display_name")
    labels = serializers.DictField(child=serializers.CharField())
    # A field named like DRF's own Field.source attribute, which the stubs type as text.
    source = serializers.ChoiceField(choices=NamespaceSource.choices)  # type: ignore[assignment]
    createdAt = serializers.DateTimeField(source="created_at")
    myRole = serializers.ChoiceField(
        source="my_role",
        choices=Role.choices,
        allow_null=True,
        help_text="Your role here; null for operators who are not members.",
    )

    class Meta:
        model = Namespace
        fields = ["name", "displayName", "labels", "source", "active", "createdAt", "myRole"]


class UsageSerializer(serializers.Serializer):
    gpus = serializers.IntegerField()
    nodes = serializers.IntegerField()
    domains = serializers.IntegerField()


class QuotaSerializer(serializers.Serializer):
    """Limits (null = unlimited) and what the namespace's live domains use now."""

    namespace = serializers.CharField()
    maxGpus = serializers.IntegerField(allow_null=True)
    maxNodes = serializers.IntegerField(allow_null=True)
    maxDomains = serializers.IntegerField(allow_null=True)
    maxNodesPerDomain = serializers.IntegerField(allow_null=True)
    maxLifetime = DurationField(allow_null=True)
    approvalAboveNodes = serializers.IntegerField(allow_null=True)
    usage = UsageSerializer()

    @staticmethod
    def shape(namespace: Namespace, quota: Quota | None, usage: dict[str, int]) -> dict[str, Any]:
        limits = {api: getattr(quota, field, None) for api, field in QUOTA_FIELDS.items()}
        return {"namespace": namespace.name, **limits, "usage": usage}


def _limit() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=LIMIT_MAX
    )


class QuotaInput(StrictSerializer):
    """PUT replaces every limit (missing = unlimited); PATCH changes only those given."""

    maxGpus = _limit()
    maxNodes = _limit()
    maxDomains = _limit()
    maxNodesPerDomain = _limit()
    maxLifetime = DurationField(required=False, allow_null=True)
    approvalAboveNodes = _limit()

    def limits(self, *, partial: bool) -> dict[str, Any]:
        return quota_limits(self.validated_data, partial=partial)


def quota_limits(data: dict[str, Any], *, partial: bool) -> dict[str, Any]:
    """Validated QuotaInput data → keyword arguments for `quota_set` (model field names)."""
    return {
        field: data.get(api) for api, field in QUOTA_FIELDS.items() if not partial or api in data
    }


class ApiTokenSerializer(serializers.ModelSerializer):
    readOnly = serializers.BooleanField(source="read_only")
    expiresAt = serializers.DateTimeField(source="expires_at", allow_null=True)
    lastUsedAt = serializers.DateTimeField(source="last_used_at", allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")
    parentId = serializers.IntegerField(
        source="parent_id",
        allow_null=True,
        help_text="The token that minted this one; it expires no later and is revoked with it.",
    )

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "readOnly",
            "expiresAt",
            "lastUsedAt",
            "createdAt",
            "parentId",
        ]


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(help_text="The secret. Shown only in this answer.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class ApiTokenInput(StrictSerializer):
    name = StrictCharField(max_length=100)
    readOnly = StrictBooleanField(required=False, default=False)
    expiresInDays = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=3650, default=None
    )


class EventActorSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(source="actor_kind", choices=ActorKind.choices)
    name = serializers.CharField(source="actor_name")


class EventObjectSerializer(serializers.Serializer):
    type = serializers.CharField(source="object_type")
    id = serializers.CharField(source="object_id")
    repr = serializers.CharField(source="object_repr")


class EventSerializer(serializers.ModelSerializer):
    time = serializers.DateTimeField(source="created_at")
    actor = EventActorSerializer(source="*")
    object = EventObjectSerializer(source="*")
    namespace = serializers.CharField(source="namespace.name", allow_null=True, default=None)
    domain = serializers.CharField(source="domain.name", allow_null=True, default=None)
    domainUid = serializers.UUIDField(source="domain.uid", allow_null=True, default=None)
    node = serializers.CharField(source="node.hostname", allow_null=True, default=None)
    requestId = serializers.CharField(source="request_id")
    details = serializers.DictField()

    class Meta:
        model = Event
        fields = ["id", "time", "actor", "verb", "object", "namespace", "domain", "domainUid"]
        fields += ["node", "requestId", "message", "details"]


class NamespaceInput(StrictSerializer):
    """Create body for a namespace (portal admins); `quota` as in the quota endpoint."""

    name = StrictCharField(max_length=63)
    displayName = StrictCharField(required=False, allow_blank=True, max_length=200, default="")
    labels = LabelsField(required=False, default=dict)
    quota = QuotaInput(required=False)


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")
    role = serializers.ChoiceField(choices=Role.choices)
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = Membership
        fields = ["username", "role", "createdAt"]


class MembershipInput(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)
