"""The parts of a ComputeDomain create body other than `spec` itself: its metadata, NVIDIA's
channel block and our placement block (`SpecInput` and `ComputeDomainInput` put them
together, in `domains`)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from domains.computedomains.models import AllocationMode, PlacementConstraint
from domains.validators import DNS1123_LABEL_MAX, validate_dns1123_label
from portal.api.serializers.common import LabelsField, StrictCharField, StrictSerializer


def _dns1123(value: str) -> None:
    try:
        validate_dns1123_label(value)
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.messages[0])


class MetadataInput(StrictSerializer):
    name = StrictCharField(
        max_length=DNS1123_LABEL_MAX,
        validators=[_dns1123],
        help_text="A DNS-1123 label, not taken by a live domain of the namespace.",
    )
    namespace = StrictCharField(
        required=False, max_length=DNS1123_LABEL_MAX, help_text="Must match the URL's."
    )
    labels = LabelsField(required=False, help_text="Kubernetes-style labels, 64 at most.")


class ResourceClaimTemplateInput(StrictSerializer):
    name = StrictCharField(
        max_length=253, help_text="A DNS-1123 subdomain; the ResourceClaimTemplate to generate."
    )


class ChannelInput(StrictSerializer):
    resourceClaimTemplate = ResourceClaimTemplateInput(
        required=False, help_text="Defaults to `<metadata.name>-channel`."
    )
    allocationMode = serializers.ChoiceField(
        choices=AllocationMode.choices,
        required=False,
        default=AllocationMode.SINGLE,
        help_text="`Single` (default): one IMEX channel; `All`: every channel on its trays.",
    )


class PlacementInput(StrictSerializer):
    constraint = serializers.ChoiceField(
        choices=PlacementConstraint.choices,
        required=False,
        default=PlacementConstraint.ANY,
        help_text="`any` clique (default), or the `clique` or `rack` that `target` names.",
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
