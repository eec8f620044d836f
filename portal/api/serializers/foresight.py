"""Blast radius answers, and the rack parts they are asked about (switch trays, power
shelves). What a tenant may not see was already folded away by `blast_radius_for`."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from domains.inventory.models import PartState, PowerShelf, SwitchTray
from portal.api.serializers.common import StrictCharField, StrictSerializer


class ScopeSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["tray", "trays", "switch_tray", "rack", "clique", "power_shelf"],
        help_text="What kind of part was asked about.",
    )
    name = serializers.CharField(help_text="Its name (hostnames, for trays).")


class DomainHitSerializer(serializers.Serializer):
    namespace = serializers.CharField(help_text="The domain's namespace.")
    name = serializers.CharField(help_text="The domain's name.")
    uid = serializers.CharField(help_text="The domain's uid.")
    phase = serializers.CharField(help_text="The domain's phase now.")
    hit = serializers.ChoiceField(
        choices=["down", "bandwidth"],
        help_text="`down`: it loses trays; `bandwidth`: its GPUs lose NVLink bandwidth.",
    )
    effect = serializers.CharField(help_text="What the loss does to this domain, in words.")
    trays = serializers.ListField(
        child=serializers.CharField(),
        help_text="Its trays that go down (hit `down`) or that slow down (`bandwidth`).",
    )
    traysTotal = serializers.IntegerField(source="trays_total", help_text="Its trays in all.")
    gpus = serializers.IntegerField(help_text="Its GPUs that are hit.")
    leaseExpiresAt = serializers.DateTimeField(
        source="lease_expires_at", allow_null=True, help_text="When its lease ends; null: never."
    )


class PowerBudgetSerializer(serializers.Serializer):
    shelvesTotal = serializers.IntegerField(
        source="shelves_total", help_text="The rack's power shelves."
    )
    shelvesUpAfter = serializers.IntegerField(
        source="shelves_up_after", help_text="Shelves still up after the loss."
    )
    capacityAfterWatts = serializers.IntegerField(
        source="capacity_after_watts", help_text="What those shelves can supply, in watts."
    )
    loadWatts = serializers.IntegerField(
        source="load_watts",
        help_text="The rack's most draw: 5.4 kW a compute tray, 0.4 kW a switch tray.",
    )
    spareShelves = serializers.IntegerField(
        source="spare_shelves", help_text="How many more shelves may fail, the load still carried."
    )
    carried = serializers.BooleanField(help_text="Whether the load is still carried.")


class OthersSerializer(serializers.Serializer):
    trays = serializers.IntegerField(source="hidden_trays", help_text="Trays, counted.")
    gpus = serializers.IntegerField(source="hidden_gpus", help_text="GPUs, counted.")


class BlastRadiusSerializer(serializers.Serializer):
    """What losing the part (down, or drained for service) would hit."""

    scope = ScopeSerializer(help_text="The part asked about.")
    hit = serializers.ChoiceField(
        choices=["down", "bandwidth", "redundancy"],
        help_text="`down`: trays stop and their domains lose members (Degraded). `bandwidth`: "
        "nothing stops; every GPU of the rack loses `bandwidthLoss` of its NVLink bandwidth. "
        "`redundancy`: nothing stops or slows; the rack has less spare power.",
    )
    summary = serializers.CharField(help_text="The answer in one sentence.")
    traysDown = serializers.ListField(
        source="trays_down", child=serializers.CharField(), help_text="Trays that stop."
    )
    gpusDown = serializers.IntegerField(source="gpus_down", help_text="GPUs on those trays.")
    domains = DomainHitSerializer(many=True, help_text="Live domains hit, as you may see them.")
    tenants = serializers.ListField(
        child=serializers.CharField(), help_text="Namespaces hit, as you may see them."
    )
    gpusHit = serializers.IntegerField(source="gpus_hit", help_text="GPUs that stop or slow down.")
    bandwidthLoss = serializers.FloatField(
        source="bandwidth_loss",
        help_text="The share of NVLink bandwidth each GPU of the rack loses, 0 to 1.",
    )
    power = PowerBudgetSerializer(
        allow_null=True, help_text="For a power shelf: the rack's power after it; else null."
    )
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


STATE_HELP = "`ok`, or `down` as an operator recorded it."
REASON_HELP = "Operators only (empty for others): why it is in that state."


class SwitchTraySerializer(OperatorReasonMixin, serializers.ModelSerializer):
    rack = serializers.CharField(source="rack.name", help_text="Its rack.")
    state = serializers.ChoiceField(choices=PartState.choices, help_text=STATE_HELP)
    stateReason = serializers.CharField(source="state_reason", help_text=REASON_HELP)

    class Meta:
        model = SwitchTray
        fields = ["name", "rack", "slot", "state", "stateReason"]
        extra_kwargs = {"name": {"help_text": "Its name, unique in the fleet."}}


class PowerShelfSerializer(OperatorReasonMixin, serializers.ModelSerializer):
    rack = serializers.CharField(source="rack.name", help_text="Its rack.")
    psuCount = serializers.IntegerField(source="psu_count", help_text="Its power supplies.")
    psuWatts = serializers.IntegerField(source="psu_watts", help_text="Watts each supplies.")
    capacityWatts = serializers.IntegerField(
        source="capacity_watts", help_text="What it supplies in all, in watts."
    )
    state = serializers.ChoiceField(choices=PartState.choices, help_text=STATE_HELP)
    stateReason = serializers.CharField(source="state_reason", help_text=REASON_HELP)

    class Meta:
        model = PowerShelf
        fields = ["name", "rack", "position", "psuCount", "psuWatts", "capacityWatts", "state"]
        fields += ["stateReason"]
        extra_kwargs = {"name": {"help_text": "Its name, unique in the fleet."}}


class PartStateInput(StrictSerializer):
    state = serializers.ChoiceField(
        choices=PartState.choices, help_text="`down` to record it failed, `ok` when back."
    )
    reason = StrictCharField(
        required=False, allow_blank=True, max_length=300, default="", help_text="Why, in words."
    )


# --- maintenance windows ----------------------------------------------------------------


class MaintenanceWindowSerializer(serializers.Serializer):
    """A window with the live domains already on its trays (whose lease reaches into it),
    as the caller may see them (a `WindowView`)."""

    id = serializers.IntegerField(source="window.pk", help_text="Cancel it by this id.")
    scope = serializers.CharField(source="window.scope", help_text="`trays`, `clique` or `rack`.")
    target = serializers.CharField(
        source="window.target", help_text="Hostnames, the clique's label or the rack's name."
    )
    reason = serializers.CharField(source="window.reason", help_text="Why, in words.")
    startsAt = serializers.DateTimeField(source="window.starts_at", help_text="When it starts.")
    endsAt = serializers.DateTimeField(source="window.ends_at", help_text="When it ends.")
    cancelledAt = serializers.DateTimeField(
        source="window.cancelled_at", allow_null=True, help_text="When it was called off, or null."
    )
    createdAt = serializers.DateTimeField(
        source="window.created_at", help_text="When it was scheduled."
    )
    trays = serializers.ListField(child=serializers.CharField(), help_text="Its trays.")
    domains = DomainHitSerializer(
        many=True, help_text="Live domains on those trays whose lease reaches into it."
    )
    tenants = serializers.ListField(
        child=serializers.CharField(), help_text="Their namespaces, as you may see them."
    )
    otherDomains = serializers.IntegerField(
        source="hidden_domains", help_text="Domains of namespaces you cannot see (a count)."
    )


class MaintenanceWindowInput(StrictSerializer):
    """Exactly one of `trays`, `clique` or `rack`."""

    trays = serializers.ListField(
        child=StrictCharField(max_length=253),
        required=False,
        max_length=1000,
        default=list,
        help_text="Trays by hostname.",
    )
    clique = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=120,
        default="",
        help_text="A clique's label or name: all its trays.",
    )
    rack = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=63,
        default="",
        help_text="A rack's name: all its trays.",
    )
    startsAt = serializers.DateTimeField(source="starts_at", help_text="When it starts (ISO 8601).")
    endsAt = serializers.DateTimeField(
        source="ends_at", help_text="When it ends; after `startsAt`."
    )
    reason = StrictCharField(max_length=300, help_text="Why; tenants see it.")
