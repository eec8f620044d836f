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
LIMITS = {  # API name → what the limit caps; null is unlimited for each
    "maxGpus": "GPUs its live domains may hold together; null: unlimited.",
    "maxNodes": "Trays its live domains may hold together; null: unlimited.",
    "maxDomains": "Live domains at once; null: unlimited.",
    "maxNodesPerDomain": "Trays one domain may ask for; null: unlimited.",
    "maxLifetime": "The longest lease a domain may ask for, e.g. `72h`; null: unlimited.",
    "approvalAboveNodes": "Requests for more trays than this wait for a portal admin; "
    "null: none wait.",
}


class NamespaceSerializer(serializers.ModelSerializer):
    displayName = serializers.CharField(
        source="display_name", help_text="A human name for the pages; may be empty."
    )
    labels = serializers.DictField(
        child=serializers.CharField(), help_text="Kubernetes-style labels."
    )
    # A field named like DRF's own Field.source attribute, which the stubs type as text.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=NamespaceSource.choices,
        help_text="Where it came from: made in the portal, or synced from Kubernetes.",
    )
    createdAt = serializers.DateTimeField(source="created_at", help_text="When it was made.")
    myRole = serializers.ChoiceField(
        source="my_role",
        choices=Role.choices,
        allow_null=True,
        help_text="Your role here; null for operators who are not members.",
    )

    class Meta:
        model = Namespace
        fields = ["name", "displayName", "labels", "source", "active", "createdAt", "myRole"]
        extra_kwargs = {"name": {"help_text": "Its name, as in Kubernetes (a DNS-1123 label)."}}


class UsageSerializer(serializers.Serializer):
    gpus = serializers.IntegerField(help_text="GPUs held by the namespace's live domains.")
    nodes = serializers.IntegerField(help_text="Trays held by its live domains.")
    domains = serializers.IntegerField(help_text="Its live domains.")


class QuotaSerializer(serializers.Serializer):
    """Limits (null = unlimited) and what the namespace's live domains use now."""

    namespace = serializers.CharField(help_text="The namespace's name.")
    maxGpus = serializers.IntegerField(allow_null=True, help_text=LIMITS["maxGpus"])
    maxNodes = serializers.IntegerField(allow_null=True, help_text=LIMITS["maxNodes"])
    maxDomains = serializers.IntegerField(allow_null=True, help_text=LIMITS["maxDomains"])
    maxNodesPerDomain = serializers.IntegerField(
        allow_null=True, help_text=LIMITS["maxNodesPerDomain"]
    )
    maxLifetime = DurationField(allow_null=True, help_text=LIMITS["maxLifetime"])
    approvalAboveNodes = serializers.IntegerField(
        allow_null=True, help_text=LIMITS["approvalAboveNodes"]
    )
    usage = UsageSerializer(help_text="What its live domains hold now.")

    @staticmethod
    def shape(namespace: Namespace, quota: Quota | None, usage: dict[str, int]) -> dict[str, Any]:
        limits = {api: getattr(quota, field, None) for api, field in QUOTA_FIELDS.items()}
        return {"namespace": namespace.name, **limits, "usage": usage}


def _limit(name: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        source=QUOTA_FIELDS[name],
        required=False,
        allow_null=True,
        min_value=0,
        max_value=LIMIT_MAX,
        help_text=LIMITS[name],
    )


class QuotaInput(StrictSerializer):
    """PUT replaces every limit (missing = unlimited); PATCH changes only those given."""

    # Each limit given is checked into its Quota field's name (`source`).

    maxGpus = _limit("maxGpus")
    maxNodes = _limit("maxNodes")
    maxDomains = _limit("maxDomains")
    maxNodesPerDomain = _limit("maxNodesPerDomain")
    maxLifetime = DurationField(
        source="max_lifetime", required=False, allow_null=True, help_text=LIMITS["maxLifetime"]
    )
    approvalAboveNodes = _limit("approvalAboveNodes")

    def limits(self, *, partial: bool) -> dict[str, Any]:
        """Keyword arguments for `quota_set`: a missing limit is unlimited unless `partial`."""
        data = self.validated_data
        return {f: data.get(f) for f in QUOTA_FIELDS.values() if not partial or f in data}


class ApiTokenSerializer(serializers.ModelSerializer):
    readOnly = serializers.BooleanField(
        source="read_only", help_text="A read-only token may only read (GET)."
    )
    expiresAt = serializers.DateTimeField(
        source="expires_at", allow_null=True, help_text="When it stops working; null: never."
    )
    lastUsedAt = serializers.DateTimeField(
        source="last_used_at", allow_null=True, help_text="Its last use; null: never used."
    )
    createdAt = serializers.DateTimeField(source="created_at", help_text="When it was made.")
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
        extra_kwargs = {
            "id": {"help_text": "Revoke it with DELETE /api/v1/tokens/{id}/."},
            "name": {"help_text": "What it is for, as its owner named it."},
        }


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(help_text="The secret. Shown only in this answer.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class ApiTokenInput(StrictSerializer):
    name = StrictCharField(max_length=100, help_text="What it is for, e.g. `ci`.")
    readOnly = StrictBooleanField(
        required=False, default=False, help_text="Only reads (GET) allowed. Default: false."
    )
    expiresInDays = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=3650,
        default=None,
        help_text="It stops working after this many days; null (default): never.",
    )


class EventActorSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        source="actor_kind", choices=ActorKind.choices, help_text="Who acted: what kind."
    )
    name = serializers.CharField(
        source="actor_name", help_text="Who acted: a username, a tray or the controller."
    )


class EventObjectSerializer(serializers.Serializer):
    type = serializers.CharField(
        source="object_type", help_text="What it acted on, e.g. `computedomain`, `node`."
    )
    id = serializers.CharField(source="object_id", help_text="That object's id or uid.")
    repr = serializers.CharField(
        source="object_repr", help_text="That object as it read then, e.g. `team-a/llm`."
    )


class EventSerializer(serializers.ModelSerializer):
    time = serializers.DateTimeField(source="created_at", help_text="When it happened.")
    actor = EventActorSerializer(source="*", help_text="Who did it.")
    object = EventObjectSerializer(source="*", help_text="What it was done to.")
    namespace = serializers.CharField(
        source="namespace.name", allow_null=True, default=None, help_text="Its namespace, if any."
    )
    domain = serializers.CharField(
        source="domain.name", allow_null=True, default=None, help_text="Its domain, if any."
    )
    domainUid = serializers.UUIDField(
        source="domain.uid", allow_null=True, default=None, help_text="That domain's uid."
    )
    node = serializers.CharField(
        source="node.hostname", allow_null=True, default=None, help_text="Its tray, if any."
    )
    requestId = serializers.CharField(
        source="request_id", help_text="The X-Request-ID of the request that did it, if any."
    )
    details = serializers.DictField(help_text="More about it; the keys depend on the verb.")

    class Meta:
        model = Event
        fields = ["id", "time", "actor", "verb", "object", "namespace", "domain", "domainUid"]
        fields += ["node", "requestId", "message", "details"]
        extra_kwargs = {
            "id": {"help_text": "Increases with time."},
            "message": {"help_text": "What happened, in words; may be empty."},
        }


class NamespaceInput(StrictSerializer):
    """Create body for a namespace (portal admins); `quota` as in the quota endpoint."""

    # Checked into `namespace_create`'s arguments, the limits given among them.

    name = StrictCharField(max_length=63, help_text="A DNS-1123 label, as in Kubernetes.")
    displayName = StrictCharField(
        source="display_name",
        required=False,
        allow_blank=True,
        max_length=200,
        default="",
        help_text="A human name for the pages.",
    )
    labels = LabelsField(required=False, default=dict, help_text="Kubernetes-style labels.")
    quota = QuotaInput(  # its limits join the namespace's own fields
        source="*", required=False, help_text="Its limits; missing ones are unlimited."
    )


ROLE_HELP = (
    "`viewer` reads; `member` also requests and releases domains; `admin` also manages the members."
)


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", help_text="The member.")
    role = serializers.ChoiceField(choices=Role.choices, help_text=ROLE_HELP)
    createdAt = serializers.DateTimeField(source="created_at", help_text="Since when.")

    class Meta:
        model = Membership
        fields = ["username", "role", "createdAt"]


class MembershipInput(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices, help_text=ROLE_HELP)
