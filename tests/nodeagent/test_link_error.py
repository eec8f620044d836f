"""The agent tells the portal, in its reports, when its other calls to the portal fail.

A small real HTTP server stands in for the portal: it serves a tray's desired state (or a
500 in its place), and records the facts and the reports the agent sends. The agent runs
its real reconcile cycles against an emulated tray.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from nodeagent.agent import Agent
from nodeagent.client import PortalError
from nodeagent.config import AgentConfig
from testbed.emulator.tray import GpuFacts, TrayFacts, prepare_tray
from tests.support.serving import serving

NODE = {"id": 7, "hostname": "gb-r07-t03"}
IDLE = {"node": NODE, "domain": None, "release": None}


class Portal(ThreadingHTTPServer):
    """`failing`: {path suffix: HTTP status} answered instead of the document."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.failing: dict[str, int] = {}
        self.reports: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Portal

    def answer(self, status: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def failure(self) -> int:
        return next((s for p, s in self.server.failing.items() if self.path.endswith(p)), 0)

    def do_GET(self) -> None:
        status = self.failure()
        self.answer(status, {"code": "server_error"}) if status else self.answer(200, IDLE)

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        status = self.failure()
        self.answer(status or 200, {"code": "invalid", "message": "no"} if status else {})

    def do_POST(self) -> None:
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/status/"):
            self.server.reports.append(doc)
        status = self.failure()
        self.answer(status or 200, {"code": "refused", "message": "full"} if status else {})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def portal() -> Iterator[Portal]:
    with serving(Portal()) as server:
        yield server


@pytest.fixture
def agent(portal, tmp_path) -> Iterator[Agent]:
    facts = TrayFacts(
        hostname=NODE["hostname"],
        ip="127.12.7.3",
        cluster_uuid="5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11",
        clique_id=1,
        gpus=[GpuFacts(index=i, uuid=f"GPU-{i}") for i in range(4)],
    )
    root = prepare_tray(tmp_path, facts)
    config = AgentConfig(
        portal=portal.url,
        join_token="dpj_x",
        root=root,
        imex_bin=["/bin/true"],
        fabric_facts=root / "run/nvidia-emu/fabric.json",
        emulated_channel_files=True,
        websocket=False,
        settle_s=0.0,
        poll_interval=600,
    )
    made = Agent(config)
    made.link.client.use(NODE["id"], "dpn_test")
    yield made
    made.link.close()


def test_a_failed_desired_state_fetch_is_in_the_next_report_and_gone_after_a_success(portal, agent):
    agent.cycle()
    assert portal.reports[-1]["link_error"] == ""

    portal.failing["/desired/"] = 500
    agent.nudge()  # the portal changed the desired state, and then failed the fetch
    delay = agent.cycle()
    assert portal.reports[-1]["link_error"] == "desired state: HTTP 500 Internal Server Error"
    assert portal.reports[-1]["step"] == "idle"  # the tray keeps what it holds, and says so
    assert delay <= 0.5  # the fetch is tried again after the backoff, not a poll later

    del portal.failing["/desired/"]
    agent.cycle()
    assert portal.reports[-1]["link_error"] == ""


def test_facts_the_portal_did_not_take_are_in_the_report_and_tried_again(portal, agent):
    portal.failing["/facts/"] = 400
    agent.cycle()
    assert portal.reports[-1]["link_error"] == "facts: HTTP 400 Bad Request: no"
    assert agent.facts.sent is None  # owed: sent again once the backoff is over

    del portal.failing["/facts/"]
    agent.link.facts_retry_at = 0.0  # the backoff is over
    agent.cycle()
    assert agent.facts.sent is not None
    assert portal.reports[-1]["link_error"] == ""


def test_a_refused_claim_is_the_portals_answer_and_a_failed_one_a_link_error(portal, agent):
    claim: Any = {"claim": {"uid": "u", "namespace": "n", "name": "c"}, "domain_uid": "d"}
    portal.failing["/claims/"] = 500
    with pytest.raises(PortalError):
        agent.link.client.claim_admit(claim)
    assert agent.link.client.link_error == "claim admission: HTTP 500 Internal Server Error: full"

    portal.failing["/claims/"] = 409  # the claim's domain is full: the kubelet is told
    with pytest.raises(PortalError, match="409"):
        agent.link.client.claim_admit(claim)
    assert agent.link.client.link_error == ""  # the portal answered
