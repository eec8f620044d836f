"""AgentFastPath decides what it answers itself and hands everything else to Django intact.

The app behind it here records what reaches it, so each test can tell "served by the fast
path" from "handed on". (tests/e2e/test_agent_fast_path.py checks the answers themselves
over the real server.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from domains.agents.joining import agent_join
from domains.inventory.models import Node
from portal.api.agent.fastpath import MAX_BODY, AgentFastPath
from testbed import factories
from testbed.agents import ensure_join_token, node_facts

pytestmark = pytest.mark.django_db(transaction=True)  # the fast path's threads must see rows

IDLE = json.dumps(
    {"domain_uid": None, "generation_applied": 0, "step": "idle", "clean": True}
).encode()


class Behind:
    """Stands for Django: answers 299 and keeps what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        self.calls.append((scope, messages))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def tray() -> tuple[Node, str]:
    (rack,) = factories.make_racks("2", ip_prefix="127.13")
    node = Node.objects.filter(rack=rack).order_by("slot").first()
    _, raw = agent_join(join_token=ensure_join_token(), facts=node_facts(node))
    return node, raw


def call(
    app: AgentFastPath,
    method: str,
    path: str,
    *,
    token: str = "",
    chunks: tuple[bytes, ...] = (b"",),
    host: bytes = b"127.0.0.1",
    content_type: bytes = b"application/json",
) -> tuple[int, dict[bytes, bytes], bytes]:
    headers = [(b"host", host), (b"content-type", content_type)]
    if token:
        headers.append((b"authorization", f"Node {token}".encode()))
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    incoming = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async_to_sync(app)(scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


def test_a_good_heartbeat_and_desired_read_are_answered_without_django(tray):
    node, raw = tray
    behind = Behind()
    app = AgentFastPath(behind)
    status, headers, body = call(
        app, "POST", f"/api/v1/agent/nodes/{node.pk}/status/", token=raw, chunks=(IDLE,)
    )
    assert (status, json.loads(body)) == (200, {"ok": True})
    assert headers[b"content-type"] == b"application/json" and headers[b"x-request-id"]
    status, _, body = call(app, "GET", f"/api/v1/agent/nodes/{node.pk}/desired/", token=raw)
    assert status == 200 and json.loads(body)["node"]["id"] == node.pk
    assert behind.calls == []
    node.refresh_from_db()
    assert node.agent_report["step"] == "idle"


@pytest.mark.parametrize(
    "case",
    ["no token", "bad token", "other node", "bad step", "not json", "text body", "bad host"],
)
def test_requests_it_would_refuse_go_to_django_with_their_body(tray, case):
    node, raw = tray
    other = Node.objects.exclude(pk=node.pk).get(rack=node.rack)
    path, token, body, kw = f"/api/v1/agent/nodes/{node.pk}/status/", raw, IDLE, {}
    if case == "no token":
        token = ""
    elif case == "bad token":
        token = "dpn_nope"
    elif case == "other node":
        path = f"/api/v1/agent/nodes/{other.pk}/status/"
    elif case == "bad step":
        body = IDLE.replace(b'"idle"', b'"dancing"')
    elif case == "not json":
        body = b"{nope"
    elif case == "text body":
        kw = {"content_type": b"text/plain"}
    else:
        kw = {"host": b"evil.example"}
    behind = Behind()
    status, _, _ = call(AgentFastPath(behind), "POST", path, token=token, chunks=(body,), **kw)
    assert status == 299
    ((_, messages),) = behind.calls
    assert b"".join(m["body"] for m in messages) == body
    other.refresh_from_db()
    node.refresh_from_db()
    assert node.agent_report == other.agent_report == {}


def test_a_body_over_the_limit_reaches_django_whole_and_in_order(tray):
    node, raw = tray
    chunks = (b"a" * (MAX_BODY // 2), b"b" * (MAX_BODY // 2), b"c" * 10, b"d" * 10)
    behind = Behind()
    path = f"/api/v1/agent/nodes/{node.pk}/status/"
    assert call(AgentFastPath(behind), "POST", path, token=raw, chunks=chunks)[0] == 299
    ((_, messages),) = behind.calls
    assert [m["body"] for m in messages] == list(chunks)
    assert [m["more_body"] for m in messages] == [True, True, True, False]


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/api/v1/agent/nodes/{pk}/status/"),
        ("POST", "/api/v1/agent/nodes/{pk}/desired/"),
        ("POST", "/api/v1/agent/join/"),
        ("GET", "/api/v1/nodes/"),
        ("GET", "/healthz"),
    ],
)
def test_other_requests_are_djangos(tray, method, path):
    node, raw = tray
    behind = Behind()
    path = path.format(pk=node.pk)
    assert call(AgentFastPath(behind), method, path, token=raw)[0] == 299
    assert len(behind.calls) == 1


def test_a_request_that_lost_its_connection_runs_once_more_then_goes_to_django(tray, monkeypatch):
    """The pool hands out a connection used moments ago without asking the server
    (portal/postgres/pool.py): one lost without a word costs the request one more run."""
    from django.db import OperationalError

    from portal.api.agent import fastpath

    node, raw = tray
    real = fastpath.desired_state
    lost = {"left": 1}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if lost["left"]:
            lost["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return real(*args, **kwargs)

    monkeypatch.setattr(fastpath, "desired_state", flaky)
    behind = Behind()
    app = AgentFastPath(behind)
    path = f"/api/v1/agent/nodes/{node.pk}/desired/"
    status, _, body = call(app, "GET", path, token=raw)
    assert status == 200 and json.loads(body)["node"]["id"] == node.pk
    lost["left"] = 2  # lost twice: Django answers (503 while PostgreSQL is away)
    assert call(app, "GET", path, token=raw)[0] == 299
    assert len(behind.calls) == 1
