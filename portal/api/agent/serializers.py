"""Input of the agent API; field names are the wire names nodeagent/ sends."""

from __future__ import annotations

from typing import Any, cast

from rest_framework import serializers

from agentwire.messages import (
    ClaimAdmission,
    ClaimRequest,
    GpuFacts,
    NodeFacts,
    PeerStatus,
    StatusReport,
)
from portal.api.agent.contract import canonical_check, serializer_for

# Generated from the contract (portal/api/agent/contract.py); the names keep the OpenAPI
# components' ("Gpu", "Condition", "Facts").
GpuSerializer = serializer_for(GpuFacts, name="Gpu")


class FactsSerializer(serializer_for(NodeFacts, name="Facts")):  # type: ignore[misc]
    """A tray's facts (agentwire.messages.NodeFacts): its fields, their checks and
    defaults are the contract's."""

    def validate_conditions(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kinds = [c["type"] for c in value]
        if len(set(kinds)) != len(kinds):
            raise serializers.ValidationError("Each condition type may appear once.")
        return value

    def facts(self) -> NodeFacts:
        document = self.document()
        document.pop("join_token", None)
        document.pop("service_account_token", None)
        return cast(NodeFacts, document)


class JoinSerializer(FactsSerializer):
    """The tray's facts and one credential: the fleet's join token, or (Kubernetes) the
    agent pod's projected service-account token."""

    join_token = serializers.CharField(
        max_length=200,
        trim_whitespace=False,
        required=False,
        min_length=1,
        help_text="The fleet's join token; or `service_account_token` instead.",
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


# The report and its peers, generated from the contract (portal/api/agent/contract.py); the
# class names keep the OpenAPI components' names ("Report", "Peer").
PeerSerializer = serializer_for(PeerStatus, name="Peer")
ReportSerializer = serializer_for(StatusReport, name="Report")

# Every tray reports every few seconds and at each step of a formation, and validating a
# report naming 18 peers through ReportSerializer would be most of the report's cost. The
# agent always sends one form (every field, JSON types, text without surrounding blanks:
# nodeagent/report.py `Reporter.doc`), in which the serializer would accept the report and
# change nothing; anything else (a missing field, "5" for 5, blanks to trim, a value out of
# range) is left to the serializer, the one place that names what is wrong.
# tests/agents/test_report_form.py holds the two to that.
_AGENTS_OWN_FORM = canonical_check(StatusReport)


def canonical_report(data: Any) -> StatusReport | None:
    """The report, when `data` is in the agent's own form (see above); None otherwise."""
    return cast(StatusReport, data) if _AGENTS_OWN_FORM(data) else None


# The DRA claim a tray's agent is about to prepare and the portal's answer, generated from
# the contract.
ClaimRequestSerializer = serializer_for(ClaimRequest)
ClaimAdmissionSerializer = serializer_for(ClaimAdmission)
