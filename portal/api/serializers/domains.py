"""ComputeDomains shaped like NVIDIA's `resource.nvidia.com/v1beta1` objects.

`spec` keeps NVIDIA's fields (numNodes, channel.resourceClaimTemplate.name,
channel.allocationMode) and adds ours (gpusPerNode, placement, lifetime); `status` keeps
NVIDIA's `status: Ready|NotReady` and `nodes[]` and adds the phase, reason, message and
Kubernetes-style conditions. A NVIDIA ComputeDomain manifest converted to JSON is a valid
create body.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from domains.computedomains.models import (
    AllocationMode,
    ApprovalState,
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
    PlacementConstraint,
)
from domains.computedomains.specs import DomainSpec, DryRunResult
from domains.foresight.models import EstimateReason, PlacementEstimate
from domains.validators import DNS1123_LABEL_MAX, validate_dns1123_label
from portal.api.serializers.common import (
    DurationField,
    LabelsField,
    StrictCharField,
    StrictSerializer,
)

API_VERSION = "resource.nvidia.com/v1beta1"
KIND = "ComputeDomain"
READY = "Ready"
NOT_READY = "NotReady"
MAX_NODES = 1024
MAX_GPUS_PER_NODE = 64

# Where the services' field names (DomainSpec) sit in the API body.
SPEC_FIELD_PATHS = {
    "name": "metadata.name",
    "labels": "metadata.labels",
    "num_nodes": "spec.numNodes",
    "gpus_per_node": "spec.gpusPerNode",
    "allocation_mode": "spec.channel.allocationMode",
    "resource_claim_template": "spec.channel.resourceClaimTemplate.name",
    "placement_constraint": "spec.placement.constraint",
    "placement_target": "spec.placement.target",
    "lifetime": "spec.lifetime",
}


# --- output ---------------------------------------------------------------------------------


class ObjectMetaSerializer(serializers.Serializer):
    name = serializers.CharField()
    namespace = serializers.CharField(source="namespace.name")
    uid = serializers.UUIDField()
    creationTimestamp = serializers.DateTimeField(source="created_at")
    generation = serializers.IntegerField()
    labels = serializers.DictField(child=serializers.CharField())


class ResourceClaimTemplateSerializer(serializers.Serializer):
    name = serializers.CharField(source="resource_claim_template")


class ChannelSerializer(serializers.Serializer):
    resourceClaimTemplate = ResourceClaimTemplateSerializer(source="*")
    allocationMode = serializers.ChoiceField(
        source="allocation_mode", choices=AllocationMode.choices
    )


class PlacementSerializer(serializers.Serializer):
    constraint = serializers.ChoiceField(
        source="placement_constraint", choices=PlacementConstraint.choices
    )
    target = serializers.CharField(source="placement_target")


class SpecSerializer(serializers.Serializer):
    numNodes = serializers.IntegerField(source="num_nodes")
    gpusPerNode = serializers.IntegerField(source="gpus_per_node")
    channel = ChannelSerializer(source="*")
    placement = PlacementSerializer(source="*")
    lifetime = DurationField(allow_null=True)


class ConditionSerializer(serializers.Serializer):
    type = serializers.CharField()
    status = serializers.ChoiceField(choices=["True", "False", "Unknown"])
    lastTransitionTime = serializers.DateTimeField()
    reason = serializers.CharField()
    message = serializers.CharField(allow_blank=True)


class MemberSerializer(serializers.Serializer):
    """One entry of NVIDIA's `status.nodes`, plus the tray's own progress."""

    name = serializers.CharField(source="node.hostname")
    ipAddress = serializers.IPAddressField(source="ip_address")
    cliqueID = serializers.CharField(source="clique.label")
    cliqueName = serializers.CharField(
        source="clique.name", help_text="The clique's short name, as the web UI shows it."
    )
    index = serializers.IntegerField()
    status = serializers.SerializerMethodField()
    state = serializers.ChoiceField(choices=MemberState.choices)
    step = serializers.CharField()
    message = serializers.CharField()
    stateChangedAt = serializers.DateTimeField(source="state_changed_at")

    @extend_schema_field(serializers.ChoiceField(choices=[READY, NOT_READY]))
    def get_status(self, member: DomainMember) -> str:
        return READY if member.state == MemberState.READY else NOT_READY


class StatusSerializer(serializers.Serializer):
    status = serializers.SerializerMethodField()
    phase = serializers.ChoiceField(choices=Phase.choices)
    reason = serializers.CharField()
    message = serializers.CharField()
    approval = serializers.ChoiceField(source="approval_state", choices=ApprovalState.choices)
    leaseExpiresAt = serializers.DateTimeField(source="lease_expires_at", allow_null=True)
    estimatedPlacementAt = serializers.SerializerMethodField()
    estimateReason = serializers.SerializerMethodField()
    estimateMessage = serializers.SerializerMethodField()
    conditions = serializers.SerializerMethodField()
    nodes = MemberSerializer(source="members.all", many=True)

    @extend_schema_field(serializers.ChoiceField(choices=[READY, NOT_READY]))
    def get_status(self, domain: ComputeDomain) -> str:
        return READY if domain.phase == Phase.READY else NOT_READY

    @extend_schema_field(
        serializers.DateTimeField(
            allow_null=True,
            help_text="While Pending or Admitted: when it would be placed, from the leases "
            "and queue ahead simulated forward; null when no time can be given "
            "(`estimateReason` says why) or when it is not waiting.",
        )
    )
    def get_estimatedPlacementAt(self, domain: ComputeDomain) -> str | None:
        estimate = _estimate(domain)
        if estimate is None or estimate.estimated_at is None:
            return None
        return serializers.DateTimeField().to_representation(estimate.estimated_at)

    @extend_schema_field(
        serializers.ChoiceField(
            choices=["", *EstimateReason.values],
            help_text="FitsNow, Estimated, NeverFits (not even with every lease ended) or "
            "NoLeaseEnds (waits on trays held without a lease end); empty when not waiting "
            "or not estimated yet.",
        )
    )
    def get_estimateReason(self, domain: ComputeDomain) -> str:
        estimate = _estimate(domain)
        return estimate.reason if estimate is not None else ""

    @extend_schema_field(serializers.CharField())
    def get_estimateMessage(self, domain: ComputeDomain) -> str:
        estimate = _estimate(domain)
        return estimate.message if estimate is not None else ""

    @extend_schema_field(ConditionSerializer(many=True))
    def get_conditions(self, domain: ComputeDomain) -> list[dict[str, Any]]:
        return domain_conditions(domain)


def _estimate(domain: ComputeDomain) -> PlacementEstimate | None:
    """The stored estimate while the domain waits (read with the domain: no query)."""
    if domain.phase not in (Phase.PENDING, Phase.ADMITTED):
        return None
    try:
        return domain.placement_estimate  # the reverse one-to-one
    except ObjectDoesNotExist:
        return None


def _condition(
    kind: str, when: datetime | None, fallback: datetime, reason: str, message: str = ""
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if when else "False",
        "lastTransitionTime": when or fallback,
        "reason": reason,
        "message": message,
    }


def domain_conditions(domain: ComputeDomain) -> list[dict[str, Any]]:
    """Kubernetes-style conditions derived from the per-phase timestamps."""
    created = domain.created_at
    waiting = domain.approval_state == ApprovalState.PENDING
    admitted_reason = "Admitted" if domain.admitted_at else "Pending"
    if waiting:
        admitted_reason = "WaitingForApproval"
    elif domain.approval_state == ApprovalState.DENIED:
        admitted_reason = "Denied"
    ready = domain.phase == Phase.READY
    conditions = [
        _condition("Admitted", domain.admitted_at, created, admitted_reason),
        _condition("Placed", domain.placed_at, created, "Placed" if domain.placed_at else "Queued"),
        {
            **_condition(
                "Ready",
                domain.ready_at if ready else None,
                domain.updated_at,
                "AllMembersReady" if ready else (domain.reason or domain.phase),
            ),
            "message": "" if ready else domain.message,
        },
    ]
    if domain.released_at:
        conditions.append(_condition("Released", domain.released_at, created, "Released"))
    if domain.failed_at:
        failure = domain.reason or "Failed"
        conditions.append(_condition("Failed", domain.failed_at, created, failure, domain.message))
    return conditions


class ComputeDomainSerializer(serializers.Serializer):
    apiVersion = serializers.SerializerMethodField()
    kind = serializers.SerializerMethodField()
    metadata = ObjectMetaSerializer(source="*")
    spec = SpecSerializer(source="*")
    status = StatusSerializer(source="*")

    @extend_schema_field(serializers.ChoiceField(choices=[API_VERSION]))
    def get_apiVersion(self, domain: ComputeDomain) -> str:
        return API_VERSION

    @extend_schema_field(serializers.ChoiceField(choices=[KIND]))
    def get_kind(self, domain: ComputeDomain) -> str:
        return KIND


# --- input ----------------------------------------------------------------------------------


def _dns1123(value: str) -> None:
    try:
        validate_dns1123_label(value)
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.messages[0])


class MetadataInput(StrictSerializer):
    name = StrictCharField(max_length=DNS1123_LABEL_MAX, validators=[_dns1123])
    namespace = StrictCharField(
        required=False, max_length=DNS1123_LABEL_MAX, help_text="Must match the URL's."
    )
    labels = LabelsField(required=False)


class ResourceClaimTemplateInput(StrictSerializer):
    name = StrictCharField(
        max_length=253, help_text="A DNS-1123 subdomain; the ResourceClaimTemplate to generate."
    )


class ChannelInput(StrictSerializer):
    resourceClaimTemplate = ResourceClaimTemplateInput(
        required=False, help_text="Defaults to `<metadata.name>-channel`."
    )
    allocationMode = serializers.ChoiceField(
        choices=AllocationMode.choices, required=False, default=AllocationMode.SINGLE
    )


class PlacementInput(StrictSerializer):
    constraint = serializers.ChoiceField(
        choices=PlacementConstraint.choices, required=False, default=PlacementConstraint.ANY
    )
    target = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=120,
        default="",
        help_text="A clique label or name (constraint `clique`) or a rack name (`rack`).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        constraint, target = attrs.get("constraint"), attrs.get("target", "")
        if constraint == PlacementConstraint.ANY and target:
            raise serializers.ValidationError({"target": ["must be empty for constraint 'any'"]})
        if constraint != PlacementConstraint.ANY and not target:
            raise serializers.ValidationError(
                {"target": [f"name the {constraint} for constraint {constraint!r}"]}
            )
        return attrs


class SpecInput(StrictSerializer):
    numNodes = serializers.IntegerField(
        min_value=0,
        max_value=MAX_NODES,
        help_text="Trays to place, all in one clique; 0: the domain follows its workload "
        "(nothing reserved; trays join as its pods' claims are prepared on them).",
    )
    gpusPerNode = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_GPUS_PER_NODE, help_text="Default: all."
    )
    channel = ChannelInput(required=False)
    placement = PlacementInput(required=False)
    lifetime = DurationField(required=False, help_text="Lease, e.g. 24h. Default: the portal's.")


class ComputeDomainInput(StrictSerializer):
    """Create body: a NVIDIA ComputeDomain manifest (as JSON) works as it is."""

    apiVersion = serializers.ChoiceField(choices=[API_VERSION], required=False)
    kind = serializers.ChoiceField(choices=[KIND], required=False)
    metadata = MetadataInput()
    spec = SpecInput()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        namespace = self.context.get("namespace")
        given = attrs["metadata"].get("namespace")
        if namespace is not None and given is not None and given != namespace.name:
            raise serializers.ValidationError(
                {"metadata": {"namespace": [f"must be {namespace.name!r} (the URL's namespace)"]}}
            )
        return attrs

    def to_spec(self) -> DomainSpec:
        meta, spec = self.validated_data["metadata"], self.validated_data["spec"]
        channel = spec.get("channel", {})
        placement = spec.get("placement", {})
        return DomainSpec(
            name=meta["name"],
            labels=meta.get("labels", {}),
            num_nodes=spec["numNodes"],
            gpus_per_node=spec.get("gpusPerNode"),
            allocation_mode=channel.get("allocationMode", AllocationMode.SINGLE),
            resource_claim_template=channel.get("resourceClaimTemplate", {}).get("name", ""),
            placement_constraint=placement.get("constraint", PlacementConstraint.ANY),
            placement_target=placement.get("target", ""),
            lifetime=spec.get("lifetime"),
        )


class ExtendInput(StrictSerializer):
    by = DurationField(help_text="How much longer the lease runs, e.g. 4h.")


# --- dry run --------------------------------------------------------------------------------


class QuotaImpactSerializer(serializers.Serializer):
    used = serializers.IntegerField(allow_null=True)
    requested = serializers.IntegerField(allow_null=True)
    limit = serializers.IntegerField(allow_null=True)


class DryRunPlacementSerializer(serializers.Serializer):
    clique = serializers.CharField()
    cliqueName = serializers.CharField(source="clique_name")
    rack = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField())


class DryRunSerializer(serializers.Serializer):
    """What `?dryRun=All` answers: where the domain would land, or why it would not."""

    dryRun = serializers.SerializerMethodField()
    placeable = serializers.BooleanField()
    quotaOk = serializers.BooleanField(source="quota_ok")
    needsApproval = serializers.BooleanField(source="needs_approval")
    message = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())
    quotaProblems = serializers.ListField(source="quota_problems", child=serializers.CharField())
    placement = serializers.SerializerMethodField()
    quotaImpact = serializers.DictField(source="quota_impact", child=QuotaImpactSerializer())
    maintenance = serializers.ListField(
        child=serializers.CharField(),
        help_text="Maintenance windows the lease would reach into: their trays are left out.",
    )
    estimatedPlacementAt = serializers.DateTimeField(
        source="estimated_placement_at",
        allow_null=True,
        help_text="When it does not fit now or needs approval: when it would be placed if "
        "requested now, behind the queue (null: see estimateReason).",
    )
    estimateReason = serializers.CharField(source="estimate_reason")
    estimateMessage = serializers.CharField(source="estimate_message")

    @extend_schema_field(serializers.ChoiceField(choices=["All"]))
    def get_dryRun(self, result: DryRunResult) -> str:
        return "All"

    @extend_schema_field(DryRunPlacementSerializer(allow_null=True))
    def get_placement(self, result: DryRunResult) -> dict[str, Any] | None:
        if not result.placeable:
            return None
        return DryRunPlacementSerializer(result).data


class ManifestsSerializer(serializers.Serializer):
    """Ready-to-apply workload manifests (YAML text) pinned to the domain's trays."""

    deployment = serializers.CharField()
    job = serializers.CharField()
    mpijob = serializers.CharField()
