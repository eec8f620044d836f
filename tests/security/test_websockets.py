"""Websockets and request heads against a real uvicorn server started as production starts
it (`python -m portal.serve`): a Redis outage closes open sockets once, with 1011 and one
log line, instead of a traceback per socket; an oversized request line or head is answered
414/431 (a websocket handshake with a long line used to wait forever); a head that never
completes is answered 408; and one address cannot hold more than a few heads open."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from domains.agents.joining import agent_join
from domains.inventory.models import Node
from testbed.agents import ensure_join_token, node_facts
from testbed.processes import running, start_server
from testbed.services import PrivateRedis

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

HANDSHAKE = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def agent_headers(fabric: Any) -> list[dict[str, str]]:
    token = ensure_join_token()
    headers = []
    for node in Node.objects.filter(rack=fabric).order_by("slot"):
        _, raw = agent_join(join_token=token, facts=node_facts(node))
        headers.append({"Authorization": f"Node {raw}"})
    return headers


def test_losing_redis_closes_every_open_socket_once_with_1011_and_one_log_line(fabric):
    with PrivateRedis() as redis:
        proc, url = start_server(REDIS_URL=redis.url)
        with running(proc):
            ws_url = url.replace("http://", "ws://") + "/ws/agent/"
            with contextlib.ExitStack() as stack:
                sockets = [
                    stack.enter_context(connect(ws_url, additional_headers=h, open_timeout=10))
                    for h in agent_headers(fabric)
                ]
                assert len(sockets) == 4
                redis.stop()
                codes = []
                for ws in sockets:
                    with pytest.raises(ConnectionClosed) as closed:
                        ws.recv(timeout=15)
                    codes.append(closed.value.rcvd.code if closed.value.rcvd else None)
            assert codes == [1011] * 4
            time.sleep(0.5)
            log = proc.log()
            assert "Exception in ASGI application" not in log, log[-3000:]
            assert "Traceback" not in log, log[-3000:]
            assert log.count("live sockets lost the channel layer") == 1, log[-3000:]


@pytest.fixture(scope="module")
def wire(django_db_setup, django_db_blocker) -> Iterator[tuple[str, int]]:
    """A server whose heads time out after 2 s, with at most 4 heads open per address."""
    proc, url = start_server(PORTAL_HEAD_TIMEOUT_S="2", PORTAL_HEADS_PER_ADDRESS="4")
    with running(proc):
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def send_head(wire: tuple[str, int], head: bytes) -> socket.socket:
    sock = socket.create_connection(wire, timeout=10)
    sock.sendall(head)
    return sock


def answer(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    sock.close()
    return data


@pytest.mark.parametrize("upgrade", [HANDSHAKE, b""], ids=["websocket", "http"])
@pytest.mark.parametrize(
    ("extra", "status"),
    [
        (b"", b"200"),
        (b"X-Pad: " + b"p" * 4000 + b"\r\n", b"200"),
        (b"X-Pad: " + b"p" * 9000 + b"\r\n", b"431"),
        (b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(40)), b"431"),
        (b"".join(b"X-N-%d: 1\r\n" % i for i in range(120)), b"431"),
    ],
    ids=["plain", "4k-field", "9k-field", "40k-of-fields", "120-fields"],
)
def test_an_oversized_head_is_answered_431(wire, upgrade, extra, status):
    path = b"/ws/agent/" if upgrade else b"/healthz"
    head = b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s\r\n" % (path, upgrade, extra)
    reply = answer(send_head(wire, head))
    expected = b"403" if upgrade and status == b"200" else status  # no token: refused
    assert reply.startswith(b"HTTP/1.1 " + expected), reply[:200]


@pytest.mark.parametrize("upgrade", [HANDSHAKE, b""], ids=["websocket", "http"])
@pytest.mark.parametrize("length", [9_000, 70_000])
def test_a_long_request_line_is_answered_414_not_left_to_time_out(wire, upgrade, length):
    path = b"/ws/agent/" if upgrade else b"/healthz"
    target = path + b"?q=" + b"a" * length
    reply = answer(
        send_head(wire, b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % (target, upgrade))
    )
    assert reply.startswith(b"HTTP/1.1 414"), reply[:200]  # left waiting, it would be 408


def test_a_head_that_never_completes_is_answered_408(wire):
    reply = answer(send_head(wire, b"GET /ws/agent/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]  # the head timeout, not a drop


def test_one_address_holds_at_most_a_few_heads_open_and_others_still_get_in(wire):
    slow = [send_head(wire, b"GET /ws/agent/ HTTP/1.1\r\n") for _ in range(4)]
    time.sleep(0.3)
    extra = send_head(wire, b"GET /ws/agent/ HTTP/1.1\r\n")
    assert answer(extra).startswith(b"HTTP/1.1 429")  # refused as one too many, not timed out
    # Another address is not counted with them.
    other = socket.create_connection(wire, timeout=10, source_address=("127.0.0.2", 0))
    other.sendall(HEALTHZ)
    assert answer(other).startswith(b"HTTP/1.1 200")
    for sock in slow:
        assert answer(sock).startswith(b"HTTP/1.1 408")
    # Once they are gone, the address gets in again.
    again = send_head(
        wire, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    assert answer(again).startswith(b"HTTP/1.1 200")


def test_a_handshake_line_the_websockets_library_refuses_is_answered_too(wire):
    # A target just under the portal's own limit, but a request line over the websockets
    # library's 8 KiB: the library refuses it, and its 414 must reach the client.
    target = b"/ws/agent/?q=" + b"a" * 8170
    head = b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % (target, HANDSHAKE)
    reply = answer(send_head(wire, head))
    assert reply.startswith(b"HTTP/1.1 414"), reply[:200]
