"""The agent's link to the portal when the connection misbehaves: a kept-alive connection
closed as it is reused, a nudge whose desired-state fetch fails.

The portal here is a small real HTTP/1.1 server standing in for the portal, or for a proxy
in front of it, that closes connections the way servers do (uvicorn closes a connection
idle for 5 s, the agent's HTTP pool keeps one for 5 s: under load the two cross).
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from nodeagent.agent import Agent
from nodeagent.client import PortalClient, PortalError
from nodeagent.config import AgentConfig
from testbed.emulator.tray import GpuFacts, TrayFacts, prepare_tray
from tests.support.serving import serving

NODE = {"id": 7, "hostname": "gb-r07-t03"}
IDLE = {"node": NODE, "domain": None, "release": None}
LINGER_0 = struct.pack("ii", 1, 0)
RELEASE = {
    "node": NODE,
    "domain": None,
    "release": {"uid": "0b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11", "request_id": "r-1"},
}


class Portal(ThreadingHTTPServer):
    """Serves `doc` at the desired-state path. `close_reused`: a request on a connection
    that served one already is dropped without an answer (the idle close crossing the
    reuse); `reset_reused`: the same, with a reset (RST) instead of a close; `down`: every
    request is dropped without an answer."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.doc: dict[str, Any] = IDLE
        self.close_reused = False
        self.reset_reused = False
        self.down = False
        self.connections = 0
        self.answered = 0
        self.dropped = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Portal

    def setup(self) -> None:
        super().setup()
        self.served = 0
        self.server.connections += 1

    def do_GET(self) -> None:
        reused = self.served > 0
        reset = self.server.reset_reused and reused
        if self.server.down or reset or (self.server.close_reused and reused):
            self.server.dropped += 1
            if reset:  # linger 0: the close sends a reset, as for data on a closed socket
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
            self.close_connection = True  # nothing written: the client reads EOF (or RST)
            return
        self.served += 1
        self.server.answered += 1  # before the answer: the client goes on once it has it
        body = json.dumps(self.server.doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def portal() -> Iterator[Portal]:
    with serving(Portal()) as server:
        yield server


@pytest.mark.parametrize("how", ["close_reused", "reset_reused"])
def test_a_kept_alive_connection_closed_as_it_is_reused_is_retried_on_a_new_one(portal, how):
    client = PortalClient(portal.url)
    client.use(NODE["id"], "dpn_test")
    assert client.desired() == IDLE
    setattr(portal, how, True)
    portal.doc = RELEASE
    assert client.desired() == RELEASE  # the reused connection dropped it; a new one answered
    assert (portal.connections, portal.dropped, portal.answered) == (2, 1, 2)
    client.close()


def test_a_portal_that_answers_nothing_is_an_error_after_one_retry(portal):
    client = PortalClient(portal.url)
    client.use(NODE["id"], "dpn_test")
    portal.down = True
    with pytest.raises(PortalError, match="desired") as failed:
        client.desired()
    assert failed.value.status == 0
    assert portal.dropped == 2
    client.close()


def test_a_nudge_whose_fetch_failed_is_fetched_on_the_next_cycle_not_a_poll_later(portal, tmp_path):
    facts = TrayFacts(
        hostname=NODE["hostname"],
        ip="127.12.7.3",
        cluster_uuid="5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11",
        clique_id=1,
        gpus=[GpuFacts(index=i, uuid=f"GPU-{i}") for i in range(4)],
    )
    root = prepare_tray(tmp_path, facts)
    agent = Agent(AgentConfig(portal=portal.url, join_token="dpj_x", root=root, poll_interval=600))
    agent.link.client.use(NODE["id"], "dpn_test")
    now = time.monotonic()
    assert agent.link.fetch_desired(now) == IDLE  # at start: fetched
    assert agent.link.fetch_desired(now + 1) == IDLE and portal.answered == 1  # not due: kept

    portal.doc, portal.down = RELEASE, True
    agent.nudge()  # the portal changed the tray's desired state, and then failed the fetch
    with pytest.raises(PortalError):
        agent.link.fetch_desired(now + 2)
    portal.down = False
    # The next cycle (after its backoff, long before the 10-minute poll) fetches again.
    assert agent.link.fetch_desired(now + 3) == RELEASE
    assert agent.link.fetch_desired(now + 4) == RELEASE and portal.answered == 2  # owed no more
    agent.link.close()
