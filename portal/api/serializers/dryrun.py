"""What `?dryRun=All` answers: where a domain would land, or why it would not, what it
would do to the quota, and when it would be placed; nothing is created."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from domains.computedomains.specs import DryRunResult


class QuotaImpactSerializer(serializers.Serializer):
    used = serializers.IntegerField(
        allow_null=True, help_text="Held by the namespace's live domains now."
    )
    requested = serializers.IntegerField(allow_null=True, help_text="What this request adds.")
    limit = serializers.IntegerField(allow_null=True, help_text="The quota; null: unlimited.")


class DryRunPlacementSerializer(serializers.Serializer):
    clique = serializers.CharField(help_text="The clique's `nvidia.com/gpu.clique` label.")
    cliqueName = serializers.CharField(
        source="clique_name", help_text="The clique's short name, as the web UI shows it."
    )
    rack = serializers.CharField(help_text="The rack's name.")
    nodes = serializers.ListField(
        child=serializers.CharField(), help_text="The trays it would get, by hostname."
    )


class DryRunSerializer(serializers.Serializer):
    """What `?dryRun=All` answers: where the domain would land, or why it would not."""

    dryRun = serializers.SerializerMethodField(help_text="Always `All`: nothing was created.")
    placeable = serializers.BooleanField(help_text="Whether it would be placed now.")
    quotaOk = serializers.BooleanField(
        source="quota_ok", help_text="Whether the namespace's quota allows it."
    )
    needsApproval = serializers.BooleanField(
        source="needs_approval", help_text="Whether a portal admin must approve it first."
    )
    message = serializers.CharField(help_text="The answer in one sentence.")
    reasons = serializers.ListField(
        child=serializers.CharField(), help_text="Why it would not be placed now; empty if so."
    )
    quotaProblems = serializers.ListField(
        source="quota_problems",
        child=serializers.CharField(),
        help_text="Each limit it would go over; empty within quota.",
    )
    placement = serializers.SerializerMethodField(
        help_text="Where it would land; null when it is not placeable now."
    )
    quotaImpact = serializers.DictField(
        source="quota_impact",
        child=QuotaImpactSerializer(),
        help_text="Per resource (`gpus`, `nodes`, `domains`): in use, requested and the limit.",
    )
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
    estimateReason = serializers.CharField(
        source="estimate_reason", help_text="As a domain's `status.estimateReason`."
    )
    estimateMessage = serializers.CharField(
        source="estimate_message", help_text="As a domain's `status.estimateMessage`."
    )
    mixedDrivers = serializers.ListField(
        source="mixed_drivers",
        child=serializers.CharField(),
        help_text="The NVIDIA drivers of the trays it would get when they differ (e.g. "
        "`580.82.07 on 3 trays`): IMEX refuses peers of another driver version, so the "
        "domain would not form. Empty when they run one driver.",
    )

    @extend_schema_field(serializers.ChoiceField(choices=["All"]))
    def get_dryRun(self, result: DryRunResult) -> str:
        return "All"

    @extend_schema_field(DryRunPlacementSerializer(allow_null=True))
    def get_placement(self, result: DryRunResult) -> dict[str, Any] | None:
        if not result.placeable:
            return None
        return DryRunPlacementSerializer(result).data
