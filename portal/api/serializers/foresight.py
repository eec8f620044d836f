"""Blast radius answers, and the rack parts they are asked about (switch trays, power
shelves). What a tenant may not see was already folded away by `blast_radius_for`."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from domains.inventory.models import PartState, PowerShelf, SwitchTray
from portal.api.serializers.common import StrictCharField, StrictSerializer


class ScopeSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["tray", "trays", "switch_tray", "rack", "clique", "power_shelf"]
    )
    name = serializers.CharField()


class DomainHitSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    uid = serializers.CharField()
    phase = serializers.CharField()
    hit = serializers.ChoiceField(choices=["down", "bandwidth"])
    effect = serializers.CharField(help_text="What the loss does to this domain, in words.")
    trays = serializers.ListField(
        child=serializers.CharField(),
        help_text="Its trays that go down (hit `down`) or that slow down (`bandwidth`).",
    )
    traysTotal = serializers.IntegerField(source="trays_total")
    gpus = serializers.IntegerField(help_text="Its GPUs that are hit.")
    leaseExpiresAt = serializers.DateTimeField(source="lease_expires_at", allow_null=True)


class PowerBudgetSerializer(serializers.Serializer):
    shelvesTotal = serializers.IntegerField(source="shelves_total")
    shelvesUpAfter = serializers.IntegerField(source="shelves_up_after")
    capacityAfterWatts = serializers.IntegerField(source="capacity_after_watts")
    loadWatts = serializers.IntegerField(
        source="load_watts",
        help_text="The rack's most draw: 5.4 kW a compute tray, 0.4 kW a switch tray.",
    )
    spareShelves = serializers.IntegerField(
        source="spare_shelves", help_text="How many more shelves may fail, the load still carried."
    )
    carried = serializers.BooleanField()


class OthersSerializer(serializers.Serializer):
    trays = serializers.IntegerField(source="hidden_trays")
    gpus = serializers.IntegerField(source="hidden_gpus")


class BlastRadiusSerializer(serializers.Serializer):
    """What losing the part (down, or drained for service) would hit."""

    scope = ScopeSerializer()
    hit = serializers.ChoiceField(
        choices=["down", "bandwidth", "redundancy"],
        help_text="`down`: trays stop and their domains lose members (Degraded). `bandwidth`: "
        "nothing stops; every GPU of the rack loses `bandwidthLoss` of its NVLink bandwidth. "
        "`redundancy`: nothing stops or slows; the rack has less spare power.",
    )
    summary = serializers.CharField()
    traysDown = serializers.ListField(source="trays_down", child=serializers.CharField())
    gpusDown = serializers.IntegerField(source="gpus_down")
    domains = DomainHitSerializer(many=True)
    tenants = serializers.ListField(child=serializers.CharField())
    gpusHit = serializers.IntegerField(source="gpus_hit")
    bandwidthLoss = serializers.FloatField(source="bandwidth_loss")
    power = PowerBudgetSerializer(allow_null=True)
    otherTenants = OthersSerializer(
        source="*", help_text="Trays and GPUs hit in namespaces you cannot see (counts only)."
    )


class OperatorReasonMixin:
    """An operator's reason for a part's state is for operators (as for trays)."""

    context: dict[str, Any]

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)  # type: ignore[misc]
        if self.context.get("operator") is not True:
            data["stateReason"] = ""
        return data


class SwitchTraySerializer(OperatorReasonMixin, serializers.ModelSerializer):
    rack = serializers.CharField(source="rack.name")
    state = serializers.ChoiceField(choices=PartState.choices)
    stateReason = serializers.CharField(source="state_reason")

    class Meta:
        model = SwitchTray
        fields = ["name", "rack", "slot", "state", "stateReason"]


class PowerShelfSerializer(OperatorReasonMixin, serializers.ModelSerializer):
    rack = serializers.CharField(source="rack.name")
    psuCount = serializers.IntegerField(source="psu_count")
    psuWatts = serializers.IntegerField(source="psu_watts")
    capacityWatts = serializers.IntegerField(source="capacity_watts")
    state = serializers.ChoiceField(choices=PartState.choices)
    stateReason = serializers.CharField(source="state_reason")

    class Meta:
        model = PowerShelf
        fields = ["name", "rack", "position", "psuCount", "psuWatts", "capacityWatts", "state"]
        fields += ["stateReason"]


class PartStateInput(StrictSerializer):
    state = serializers.ChoiceField(choices=PartState.choices)
    reason = StrictCharField(required=False, allow_blank=True, max_length=300, default="")


# --- maintenance windows ----------------------------------------------------------------


class MaintenanceWindowSerializer(serializers.Serializer):
    """A window with the live domains already on its trays (whose lease reaches into it),
    as the caller may see them (a `WindowView`)."""

    id = serializers.IntegerField(source="window.pk")
    scope = serializers.CharField(source="window.scope")
    target = serializers.CharField(source="window.target")
    reason = serializers.CharField(source="window.reason")
    startsAt = serializers.DateTimeField(source="window.starts_at")
    endsAt = serializers.DateTimeField(source="window.ends_at")
    cancelledAt = serializers.DateTimeField(source="window.cancelled_at", allow_null=True)
    createdAt = serializers.DateTimeField(source="window.created_at")
    trays = serializers.ListField(child=serializers.CharField())
    domains = DomainHitSerializer(many=True)
    tenants = serializers.ListField(child=serializers.CharField())
    otherDomains = serializers.IntegerField(
        source="hidden_domains", help_text="Domains of namespaces you cannot see (a count)."
    )


class MaintenanceWindowInput(StrictSerializer):
    """Exactly one of `trays`, `clique` or `rack`."""

    trays = serializers.ListField(
        child=StrictCharField(max_length=253), required=False, max_length=1000, default=list
    )
    clique = StrictCharField(required=False, allow_blank=True, max_length=120, default="")
    rack = StrictCharField(required=False, allow_blank=True, max_length=63, default="")
    startsAt = serializers.DateTimeField()
    endsAt = serializers.DateTimeField()
    reason = StrictCharField(max_length=300)
