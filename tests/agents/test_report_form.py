"""The fast path recognises a report in the agent's own form without DRF
(`canonical_report`): whatever it accepts, ReportSerializer accepts too and reads as the
same document; the rest is left to the serializer, which names what is wrong. Both are
generated from the contract's `StatusReport`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentwire.messages import DOMAIN_STATES, PEER_STATUSES, StatusReport, Step, status_report
from agentwire.schema import json_schema, wire
from domains.agents.heartbeats import stored_report
from portal.api.agent.contract import canonical_check, serializer_for
from portal.api.agent.serializers import ReportSerializer, canonical_report

UID = "0b7e3c4e-8d6a-4f1e-9a55-3f7f0d2c9e11"


def agent_report(**over: Any) -> dict[str, Any]:
    """A report as nodeagent/report.py `Reporter.doc` writes it (every field of the contract):
    a ready member of 18."""
    doc = status_report(
        domain_uid=UID,
        generation_applied=3,
        step=Step.READY,
        daemon_state="READY",
        domain_state="UP",
        peers=[{"index": i, "ip": f"10.1.0.{i}", "status": "CONNECTED"} for i in range(18)],
        channels_present=[1],
    )
    return dict(doc) | over


def drf(data: Any) -> StatusReport | None:
    serializer = ReportSerializer(data=data)
    return serializer.document() if serializer.is_valid() else None


def test_the_agents_reports_are_recognised_as_the_serializer_reads_them():
    for doc in (
        agent_report(),
        agent_report(domain_uid=None, step=Step.IDLE, peers=[], channels_present=[], clean=True),
        agent_report(step=Step.FAILED, error="nvidia-imex exited: code 1", daemon_state=""),
    ):
        assert canonical_report(doc) is not None
        assert canonical_report(doc) == drf(doc)


# Values the serializer reads differently from how they are written, or refuses.
AWKWARD = st.sampled_from(
    [
        None,
        "",
        " ",
        "x ",
        " x",
        "\x00",
        "\ud800",
        "5",
        5,
        -1,
        0,
        1.0,
        True,
        False,
        [],
        {},
        "A" * 33,
        "A" * 2001,
        4096,
        1 << 20,
        (1 << 20) + 1,
        UID.upper(),
        UID.replace("-", ""),
        "urn:uuid:" + UID,
        "UP",
        "up",
        "READY",
        "CONNECTED",
        "connected",
        *Step.ALL,
        *DOMAIN_STATES,
        *PEER_STATUSES,
    ]
)


@st.composite
def reports(draw: st.DrawFn) -> Any:
    doc: dict[str, Any] = agent_report()
    peers = [dict(p) for p in doc["peers"][: draw(st.integers(0, 3))]]
    doc["peers"] = peers
    for _ in range(draw(st.integers(0, 3))):
        target = draw(st.sampled_from(["report", "peer", "drop", "extra", "channels"]))
        if target == "report":
            doc[draw(st.sampled_from(sorted(doc)))] = draw(AWKWARD)
        elif target == "peer" and peers:
            peer = draw(st.sampled_from(peers))
            peer[draw(st.sampled_from(["index", "ip", "status", "other"]))] = draw(AWKWARD)
        elif target == "drop":
            doc.pop(draw(st.sampled_from(sorted(doc))), None)
        elif target == "extra":
            doc[draw(st.sampled_from(["extra", "node", "received_at"]))] = draw(AWKWARD)
        elif target == "channels":
            doc["channels_present"] = draw(st.lists(AWKWARD, max_size=3))
    return doc


@settings(max_examples=300, deadline=None)
@given(reports())
def test_what_is_recognised_the_serializer_accepts_and_reads_the_same(doc):
    fast = canonical_report(doc)
    if fast is not None:
        assert drf(doc) == fast


def test_the_stored_report_is_the_agents_document_and_when_it_came():
    report = canonical_report(agent_report())
    assert report is not None
    at = datetime(2026, 11, 23, tzinfo=UTC)
    assert stored_report(report, at) == agent_report() | {"received_at": at.isoformat()}
    bare = status_report(domain_uid=None, generation_applied=0, step=Step.IDLE)
    assert stored_report(bare, at) == drf({"generation_applied": 0, "step": Step.IDLE}) | {
        "received_at": at.isoformat()
    }


def test_every_field_of_the_contract_is_validated_and_defaulted():
    assert set(ReportSerializer().fields) == set(StatusReport.__annotations__)
    assert drf({"generation_applied": 0, "step": Step.IDLE}) == status_report(
        domain_uid=None, generation_applied=0, step=Step.IDLE
    )


class WithTemperature(StatusReport):
    """The report with one field more, as a change to the contract would add it."""

    gpu_temperature: Annotated[int, wire(0, minimum=0, maximum=200)]


def test_a_field_added_to_the_contract_needs_no_code_of_the_portals_to_be_checked():
    check, serializer = canonical_check(WithTemperature), serializer_for(WithTemperature)
    assert check(agent_report(gpu_temperature=70))
    assert not check(agent_report())  # the agent's own form carries every field
    refused = serializer(data=agent_report(gpu_temperature=300))
    assert not refused.is_valid() and set(refused.errors) == {"gpu_temperature"}
    defaulted = serializer(data=agent_report())
    assert defaulted.is_valid() and defaulted.document()["gpu_temperature"] == 0
    schema = json_schema(WithTemperature)["properties"]["gpu_temperature"]
    assert schema == {"type": "integer", "minimum": 0, "maximum": 200}
