"""Input of the agent API; field names are the wire names nodeagent/ sends."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from agentwire.messages import DOMAIN_STATES, FABRIC_STATES, PEER_STATUSES
from domains.agents.facts import GpuFacts, NodeFacts
from domains.agents.report import AgentReport, PeerStatus, Step
from domains.inventory.services import ConditionFacts
from portal.api.serializers.common import StrictSerializer


class GpuSerializer(StrictSerializer):
    index = serializers.IntegerField(min_value=0, max_value=63)
    uuid = serializers.CharField(max_length=64)
    product = serializers.CharField(max_length=100, allow_blank=True, required=False, default="")
    fabric_state = serializers.ChoiceField(list(FABRIC_STATES), required=False, default="COMPLETED")


class ConditionSerializer(StrictSerializer):
    type = serializers.RegexField(r"^[A-Z][A-Za-z0-9]{1,63}$")
    blocking = serializers.BooleanField()
    message = serializers.CharField(max_length=2000)


class FactsSerializer(StrictSerializer):
    """A tray's facts (agentwire.messages.NodeFacts)."""

    hostname = serializers.RegexField(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
    ip = serializers.IPAddressField(required=False, allow_blank=True, default="")
    gpus = GpuSerializer(many=True, required=False, default=list)
    cluster_uuid = serializers.CharField(
        max_length=36, required=False, allow_blank=True, default=""
    )
    clique_id = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    driver_version = serializers.CharField(
        max_length=40, required=False, allow_blank=True, default=""
    )
    imex_version = serializers.CharField(
        max_length=40, required=False, allow_blank=True, default=""
    )
    channel_major = serializers.IntegerField(
        min_value=1, max_value=4095, required=False, allow_null=True
    )
    channel_count = serializers.IntegerField(
        min_value=1, max_value=1 << 20, required=False, default=2048
    )
    agent_version = serializers.CharField(
        max_length=40, required=False, allow_blank=True, default=""
    )
    conditions = ConditionSerializer(many=True, required=False, default=list)

    def validate_conditions(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(value) > 32:
            raise serializers.ValidationError("At most 32 conditions.")
        kinds = [c["type"] for c in value]
        if len(set(kinds)) != len(kinds):
            raise serializers.ValidationError("Each condition type may appear once.")
        return value

    def facts(self) -> NodeFacts:
        data: dict[str, Any] = dict(self.validated_data)
        data.pop("join_token", None)
        data.pop("service_account_token", None)
        data["gpus"] = [GpuFacts(**g) for g in data.get("gpus", [])]
        data["conditions"] = [ConditionFacts(**c) for c in data.get("conditions", [])]
        data["ip"] = data.get("ip") or None
        return NodeFacts(**data)


class JoinSerializer(FactsSerializer):
    """The tray's facts and one credential: the fleet's join token, or (Kubernetes) the
    agent pod's projected service-account token."""

    join_token = serializers.CharField(
        max_length=200, trim_whitespace=False, required=False, min_length=1
    )
    service_account_token = serializers.CharField(
        max_length=16384,
        trim_whitespace=False,
        required=False,
        min_length=1,
        help_text="Kubernetes: the agent pod's projected service-account token for the "
        "portal's audience, verified with a TokenReview; instead of `join_token`.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = [name for name in ("join_token", "service_account_token") if name in attrs]
        if len(given) != 1:
            raise serializers.ValidationError(
                {
                    given[-1] if given else "join_token": [
                        "Give one credential: join_token or service_account_token."
                    ]
                }
            )
        return attrs


class PeerSerializer(StrictSerializer):
    index = serializers.IntegerField(min_value=0, max_value=4095)
    ip = serializers.CharField(max_length=253, allow_blank=True)
    status = serializers.ChoiceField(list(PEER_STATUSES))


class ReportSerializer(StrictSerializer):
    domain_uid = serializers.UUIDField(allow_null=True, required=False, default=None)
    generation_applied = serializers.IntegerField(min_value=0)
    step = serializers.ChoiceField(list(Step.ALL))
    daemon_state = serializers.CharField(
        max_length=32, allow_blank=True, required=False, default=""
    )
    domain_state = serializers.ChoiceField(
        ["", "UP", "DEGRADED", "DOWN"], required=False, default=""
    )
    peers = PeerSerializer(many=True, required=False, default=list)
    channels_present = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=1 << 20),
        required=False,
        default=list,
        max_length=1 << 16,
    )
    clean = serializers.BooleanField(required=False, default=False)
    error = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")
    message = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")

    def report(self) -> AgentReport:
        data = dict(self.validated_data)
        uid = data.pop("domain_uid")
        data["peers"] = [PeerStatus(**p) for p in data.get("peers", [])]
        return AgentReport(domain_uid=str(uid) if uid else None, **data)


# --- the report in the agent's own form, recognised without DRF ---------------------------------
# Every tray reports every few seconds and at each step of a formation, and validating a
# report naming 18 peers through ReportSerializer would be most of the report's cost. The
# agent always sends one form (every field, JSON types, text without surrounding blanks:
# nodeagent/agent.py `report_doc`). `canonical_report` recognises exactly that form, in
# which the serializer would accept the report and change nothing, and returns the same
# AgentReport; anything else (a missing field, "5" for 5, blanks to trim, a
# value out of range) it leaves to the serializer, the one place that names what is wrong.
# tests/agents/test_report_form.py holds the two to that.
_REPORT_KEYS = frozenset(ReportSerializer().fields)
_PEER_KEYS = frozenset(PeerSerializer().fields)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NOT_IN_TEXT = re.compile(r"[\x00\ud800-\udfff]")  # refused by DRF's CharField
_STEPS = frozenset(Step.ALL)
_DOMAIN_STATES = frozenset(DOMAIN_STATES)
_PEER_STATUSES = frozenset(PEER_STATUSES)


def _text(value: Any, max_length: int) -> bool:
    return (
        type(value) is str
        and len(value) <= max_length
        and value == value.strip()
        and not _NOT_IN_TEXT.search(value)
    )


def _whole(value: Any, low: int, high: int | None = None) -> bool:
    return type(value) is int and value >= low and (high is None or value <= high)


def canonical_report(data: Any) -> AgentReport | None:
    """The report, when `data` is in the agent's own form (see above); None otherwise."""
    if type(data) is not dict or data.keys() != _REPORT_KEYS:
        return None
    uid, peers, channels = data["domain_uid"], data["peers"], data["channels_present"]
    if not (
        (uid is None or (type(uid) is str and _UUID.fullmatch(uid)))
        and _whole(data["generation_applied"], 0)
        and type(data["step"]) is str
        and data["step"] in _STEPS
        and _text(data["daemon_state"], 32)
        and type(data["domain_state"]) is str
        and data["domain_state"] in _DOMAIN_STATES
        and type(data["clean"]) is bool
        and _text(data["error"], 2000)
        and _text(data["message"], 2000)
        and type(channels) is list
        and len(channels) <= 1 << 16
        and all(_whole(n, 0, 1 << 20) for n in channels)
        and type(peers) is list
    ):
        return None
    for peer in peers:
        if not (
            type(peer) is dict
            and peer.keys() == _PEER_KEYS
            and _whole(peer["index"], 0, 4095)
            and _text(peer["ip"], 253)
            and type(peer["status"]) is str
            and peer["status"] in _PEER_STATUSES
        ):
            return None
    return AgentReport(
        domain_uid=uid,
        generation_applied=data["generation_applied"],
        step=data["step"],
        daemon_state=data["daemon_state"],
        domain_state=data["domain_state"],
        peers=[PeerStatus(index=p["index"], ip=p["ip"], status=p["status"]) for p in peers],
        channels_present=list(channels),
        clean=data["clean"],
        error=data["error"],
        message=data["message"],
    )


_K8S_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"


class ClaimRefSerializer(serializers.Serializer):
    uid = serializers.UUIDField(format="hex_verbose")
    namespace = serializers.RegexField(_K8S_NAME, max_length=63)
    name = serializers.RegexField(_K8S_NAME, max_length=253)


class ClaimRequestSerializer(serializers.Serializer):
    """A DRA claim the tray's agent is about to prepare (agentwire.messages.ClaimRequest)."""

    claim = ClaimRefSerializer()
    domain_uid = serializers.UUIDField(
        format="hex_verbose", help_text="From the claim's opaque config (its template)."
    )


class ClaimAdmissionSerializer(serializers.Serializer):
    """The portal's answer (agentwire.messages.ClaimAdmission)."""

    domain_uid = serializers.UUIDField(format="hex_verbose")
    domain_name = serializers.CharField(help_text="<namespace>/<name>")
    index = serializers.IntegerField(help_text="The tray's index in the domain.")
    joined = serializers.BooleanField(help_text="This claim made the tray a member.")
