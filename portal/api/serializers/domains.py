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
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from domains.computedomains.ensembles import ensembles
from domains.computedomains.models import (
    AllocationMode,
    ApprovalState,
    ComputeDomain,
    DomainMember,
    MemberState,
    Phase,
    PlacementConstraint,
    ReplacePolicy,
)
from domains.computedomains.specs import DomainSpec
from domains.foresight.models import EstimateReason, PlacementEstimate
from portal.api.serializers.common import DurationField, StrictSerializer
from portal.api.serializers.specinput import ChannelInput, MetadataInput, PlacementInput

API_VERSION = "resource.nvidia.com/v1beta1"
KIND = "ComputeDomain"
READY = "Ready"
NOT_READY = "NotReady"
MAX_NODES = 1024
MAX_GPUS_PER_NODE = 64

SPAN_HELP = (
    "A placed domain over this many {}, an even share of its trays in each (one IMEX "
    "ensemble per clique); 0: placement decides (one clique if it fits, else the fewest)."
)
SPAN_CLIQUES_HELP = SPAN_HELP.format("NVLink cliques")
SPAN_RACKS_HELP = SPAN_HELP.format("racks, one clique in each,") + " Not with `spanCliques`."
REPLACE_HELP = (
    "A placed domain's tray lost (down, or its agent silent past the failover grace): `auto`, "
    "a free tray of its clique takes its place; `manual`, an operator picks the tray, or none."
)

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
    "replace_policy": "spec.replace",
    "span_cliques": "spec.spanCliques",
    "span_racks": "spec.spanRacks",
}


# --- output ---------------------------------------------------------------------------------


class ObjectMetaSerializer(serializers.Serializer):
    name = serializers.CharField(
        help_text="The domain's name; no two live domains of a namespace share one."
    )
    namespace = serializers.CharField(source="namespace.name", help_text="Its namespace.")
    uid = serializers.UUIDField(help_text="Its identity for good (a name is reused later).")
    creationTimestamp = serializers.DateTimeField(
        source="created_at", help_text="When it was requested."
    )
    generation = serializers.IntegerField(
        help_text="Bumped whenever the desired state of its trays changes."
    )
    labels = serializers.DictField(
        child=serializers.CharField(), help_text="Kubernetes-style labels given at creation."
    )


class ResourceClaimTemplateSerializer(serializers.Serializer):
    name = serializers.CharField(
        source="resource_claim_template",
        help_text="The ResourceClaimTemplate (in the namespace) pods claim the channel with.",
    )


class ChannelSerializer(serializers.Serializer):
    resourceClaimTemplate = ResourceClaimTemplateSerializer(
        source="*", help_text="NVIDIA's: the claim template for the domain's IMEX channel."
    )
    allocationMode = serializers.ChoiceField(
        source="allocation_mode",
        choices=AllocationMode.choices,
        help_text="`Single`: one IMEX channel; `All`: every channel on the member trays.",
    )


class PlacementSerializer(serializers.Serializer):
    constraint = serializers.ChoiceField(
        source="placement_constraint",
        choices=PlacementConstraint.choices,
        help_text="`any` clique, a given `clique` or a given `rack`.",
    )
    target = serializers.CharField(
        source="placement_target", help_text="The clique or rack named; empty for `any`."
    )


class SpecSerializer(serializers.Serializer):
    numNodes = serializers.IntegerField(
        source="num_nodes",
        help_text="Trays, in one NVLink clique or several; 0: the domain follows its workload.",
    )
    gpusPerNode = serializers.IntegerField(
        source="gpus_per_node", help_text="GPUs it uses on each tray."
    )
    channel = ChannelSerializer(source="*", help_text="NVIDIA's channel block.")
    placement = PlacementSerializer(source="*", help_text="Where its trays may come from.")
    lifetime = DurationField(allow_null=True, help_text="The lease, e.g. `24h`; null: none.")
    replace = serializers.CharField(source="replace_policy", help_text=REPLACE_HELP)
    spanCliques = serializers.IntegerField(source="span_cliques", help_text=SPAN_CLIQUES_HELP)
    spanRacks = serializers.IntegerField(source="span_racks", help_text=SPAN_RACKS_HELP)


class ConditionSerializer(serializers.Serializer):
    type = serializers.CharField(
        help_text="`Admitted`, `Placed`, `Ready`; once it ends, `Released` or `Failed`."
    )
    status = serializers.ChoiceField(
        choices=["True", "False", "Unknown"], help_text="Whether it holds, Kubernetes-style."
    )
    lastTransitionTime = serializers.DateTimeField(help_text="When `status` last changed.")
    reason = serializers.CharField(help_text="One CamelCase word, e.g. `AllMembersReady`.")
    message = serializers.CharField(allow_blank=True, help_text="Details in words, or empty.")


class MemberSerializer(serializers.Serializer):
    """One entry of NVIDIA's `status.nodes`, plus the tray's own progress."""

    name = serializers.CharField(source="node.hostname", help_text="The tray's hostname.")
    ipAddress = serializers.IPAddressField(
        source="ip_address", help_text="Where the other members' IMEX daemons reach this one."
    )
    cliqueID = serializers.CharField(
        source="clique.label", help_text="Its `nvidia.com/gpu.clique` label."
    )
    cliqueName = serializers.CharField(
        source="clique.name", help_text="The clique's short name, as the web UI shows it."
    )
    index = serializers.IntegerField(help_text="Its place in its clique's ensemble, from 0.")
    status = serializers.SerializerMethodField(
        help_text="NVIDIA's: `Ready` when `state` is `ready`."
    )
    state = serializers.ChoiceField(
        choices=MemberState.choices, help_text="The tray's own progress in the domain."
    )
    step = serializers.CharField(help_text="What its agent is doing now; empty when idle.")
    message = serializers.CharField(help_text="Its agent's last word on it, e.g. an error.")
    stateChangedAt = serializers.DateTimeField(
        source="state_changed_at", help_text="When `state` last changed."
    )

    @extend_schema_field(serializers.ChoiceField(choices=[READY, NOT_READY]))
    def get_status(self, member: DomainMember) -> str:
        return READY if member.state == MemberState.READY else NOT_READY


class EnsembleSerializer(serializers.Serializer):
    """One NVLink clique of the domain and its IMEX ensemble (its members in that clique)."""

    cliqueID = serializers.CharField(
        source="clique.label", help_text="The clique's `nvidia.com/gpu.clique` label."
    )
    cliqueName = serializers.CharField(source="clique.name", help_text="Its short name.")
    rack = serializers.CharField(
        source="clique.rack.name", default="", help_text="The rack its trays are in."
    )
    members = serializers.IntegerField(help_text="The domain's trays in this clique.")
    ready = serializers.IntegerField(help_text="How many of them are ready.")
    channel = serializers.IntegerField(
        allow_null=True,
        help_text="`Single`: the IMEX channel its workload opens in this clique (each clique "
        "has its own ledger); null in `All` mode (every channel) or before it has one.",
    )


class StatusSerializer(serializers.Serializer):
    status = serializers.SerializerMethodField(
        help_text="NVIDIA's summary: `Ready` only in phase Ready."
    )
    phase = serializers.ChoiceField(
        choices=Phase.choices,
        help_text="Pending, Admitted, Forming, Ready (Degraded when it lost a tray), "
        "Releasing, Released; or Failed.",
    )
    reason = serializers.CharField(help_text="Why it is where it is: one CamelCase word.")
    message = serializers.CharField(help_text="The same, in words.")
    approval = serializers.ChoiceField(
        source="approval_state",
        choices=ApprovalState.choices,
        help_text="`pending` while a portal admin must decide; else the decision.",
    )
    leaseExpiresAt = serializers.DateTimeField(
        source="lease_expires_at",
        allow_null=True,
        help_text="When the lease ends and it is released; null until placed, or without one.",
    )
    estimatedPlacementAt = serializers.SerializerMethodField()
    estimateReason = serializers.SerializerMethodField()
    estimateMessage = serializers.SerializerMethodField(
        help_text="The estimate in words, or why none can be given."
    )
    conditions = serializers.SerializerMethodField(help_text="Kubernetes-style conditions.")
    nodes = MemberSerializer(
        source="members.all", many=True, help_text="Its trays (NVIDIA's `status.nodes`)."
    )
    cliques = serializers.SerializerMethodField(
        help_text="Its NVLink cliques, one IMEX ensemble each (several when it spans racks), "
        "in the order of `nodes`; a domain that follows its workload lists the cliques its "
        "pods are in so far."
    )

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

    @extend_schema_field(EnsembleSerializer(many=True))
    def get_cliques(self, domain: ComputeDomain) -> list[dict[str, Any]]:
        held = getattr(domain, "live_channels", None)  # prefetched by the list and detail
        if held is None:
            held = list(domain.channels.filter(released_at__isnull=True))
        single = domain.allocation_mode != AllocationMode.ALL
        channel = {c.clique_id: c.channel for c in held} if single else {}
        parts = [
            {
                "clique": part.clique,
                "members": len(part.members),
                "ready": part.ready,
                "channel": channel.get(part.clique.pk),
            }
            for part in ensembles(list(domain.members.all()))
        ]
        return list(EnsembleSerializer(parts, many=True).data)


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
    apiVersion = serializers.SerializerMethodField(help_text="As NVIDIA's objects.")
    kind = serializers.SerializerMethodField(help_text="As NVIDIA's objects.")
    metadata = ObjectMetaSerializer(source="*", help_text="Its name and identity.")
    spec = SpecSerializer(source="*", help_text="What was asked for; fixed at creation.")
    status = StatusSerializer(source="*", help_text="Where it stands now.")

    @extend_schema_field(serializers.ChoiceField(choices=[API_VERSION]))
    def get_apiVersion(self, domain: ComputeDomain) -> str:
        return API_VERSION

    @extend_schema_field(serializers.ChoiceField(choices=[KIND]))
    def get_kind(self, domain: ComputeDomain) -> str:
        return KIND


# --- input ----------------------------------------------------------------------------------


class SpecInput(StrictSerializer):
    numNodes = serializers.IntegerField(
        min_value=0,
        max_value=MAX_NODES,
        help_text="Trays to place (in one clique when they fit, else the fewest that hold "
        "them); 0: the domain follows its workload (nothing reserved; trays join as its pods' "
        "claims are prepared on them).",
    )
    gpusPerNode = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_GPUS_PER_NODE, help_text="Default: all."
    )
    channel = ChannelInput(required=False, help_text="NVIDIA's channel block; optional.")
    placement = PlacementInput(required=False, help_text="Default: any clique.")
    lifetime = DurationField(required=False, help_text="Lease, e.g. 24h. Default: the portal's.")
    replace = serializers.ChoiceField(
        choices=ReplacePolicy.values, required=False, help_text=REPLACE_HELP + " Default: auto."
    )
    spanCliques = serializers.IntegerField(required=False, min_value=0, help_text=SPAN_CLIQUES_HELP)
    spanRacks = serializers.IntegerField(required=False, min_value=0, help_text=SPAN_RACKS_HELP)


class ComputeDomainInput(StrictSerializer):
    """Create body: a NVIDIA ComputeDomain manifest (as JSON) works as it is."""

    apiVersion = serializers.ChoiceField(
        choices=[API_VERSION], required=False, help_text="Optional, as in NVIDIA's manifests."
    )
    kind = serializers.ChoiceField(
        choices=[KIND], required=False, help_text="Optional, as in NVIDIA's manifests."
    )
    metadata = MetadataInput(help_text="Its name, and labels.")
    spec = SpecInput(help_text="What to place.")

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
            replace_policy=spec.get("replace", ReplacePolicy.AUTO),
            span_cliques=spec.get("spanCliques", 0),
            span_racks=spec.get("spanRacks", 0),
        )


class ExtendInput(StrictSerializer):
    by = DurationField(help_text="How much longer the lease runs, e.g. 4h.")


class ManifestsSerializer(serializers.Serializer):
    """Ready-to-apply workload manifests (YAML text) pinned to the domain's trays."""

    deployment = serializers.CharField(help_text="A Deployment, one pod per tray.")
    job = serializers.CharField(help_text="A Job running one pod per tray to completion.")
    mpijob = serializers.CharField(help_text="A Kubeflow MPIJob: a launcher and the workers.")
