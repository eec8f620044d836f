"""Request bodies against a real uvicorn server started as production starts it, over raw
sockets: a body over the largest any route takes is answered 413 before it is read (it used
to be spooled to a temporary file, 200 MB of it, before a 403), a body that does not arrive
in time is answered 408 (slow bodies used to hold their connections for good), and one
address holds at most a few incomplete requests open."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import pytest

from testbed.processes import running, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

MIB = 1 << 20


@pytest.fixture(scope="module")
def wire(django_db_setup, django_db_blocker) -> Iterator[tuple[str, int]]:
    """A server whose bodies time out after 2 s, with at most 4 requests open per address."""
    proc, url = start_server(PORTAL_BODY_TIMEOUT_S="2", PORTAL_HEADS_PER_ADDRESS="4")
    with running(proc):
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)
        assert "Traceback" not in proc.log(), proc.log()[-3000:]


def head(path: str, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:  # the server closed with our body unread: the answer came
        pass
    sock.close()
    return data


def json_body(reply: bytes) -> dict:
    return json.loads(reply.split(b"\r\n\r\n", 1)[1])


@pytest.mark.parametrize("path", ["/api/v1/tokens/", "/login/", "/api/v1/agent/nodes/1/status/"])
def test_a_200_mb_body_is_refused_before_it_is_read(wire, path):
    sock = socket.create_connection(wire, timeout=10)
    sock.sendall(head(path, Content_Length=str(200_000_000)) + b"{" + b" " * 65536)
    reply = answer(sock)  # answered after 64 KiB of the 200 MB: nothing waited for the rest
    assert reply.startswith(b"HTTP/1.1 413"), reply[:300]
    if path.startswith("/api/"):
        assert json_body(reply)["code"] == "too_large"


def test_a_chunked_body_is_refused_once_it_grows_past_the_limit(wire):
    sock = socket.create_connection(wire, timeout=10)
    sock.sendall(head("/api/v1/tokens/", Transfer_Encoding="chunked"))
    chunk = b"%x\r\n%s\r\n" % (256 * 1024, b" " * 256 * 1024)
    with contextlib.suppress(OSError):  # refused (and closed) before the client is done
        for _ in range(16):  # 4 MiB
            sock.sendall(chunk)
    reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:300]


def test_a_body_that_does_not_arrive_in_time_is_answered_408(wire):
    sock = socket.create_connection(wire, timeout=10)
    sock.sendall(head("/api/v1/agent/join/", Content_Length="100000") + b'{"hostname"')
    with contextlib.suppress(OSError):  # a byte now and then, as a slowloris sends them
        for _ in range(40):
            time.sleep(0.25)
            sock.sendall(b" ")
    reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:300]
    assert json_body(reply)["code"] == "timeout"


def test_one_address_holds_at_most_a_few_bodies_open_and_others_still_get_in(wire):
    slow = []
    for _ in range(4):
        sock = socket.create_connection(wire, timeout=10)
        sock.sendall(head("/api/v1/agent/join/", Content_Length="1000") + b"{")
        slow.append(sock)
    time.sleep(0.3)
    extra = socket.create_connection(wire, timeout=10)
    extra.sendall(head("/api/v1/agent/join/", Content_Length="1000") + b"{")
    refused = answer(extra)
    assert refused.startswith(b"HTTP/1.1 429") and b"retry-after" in refused.lower()
    other = socket.create_connection(wire, timeout=10, source_address=("127.0.0.2", 0))
    other.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert answer(other).startswith(b"HTTP/1.1 200")
    for sock in slow:
        assert answer(sock).startswith(b"HTTP/1.1 408")


def test_a_body_within_the_limits_is_answered_as_before(wire):
    body = json.dumps({"join_token": "dpj_nope", "hostname": "x", "pad": "p" * (MIB - 200)})
    sock = socket.create_connection(wire, timeout=10)
    sock.sendall(head("/api/v1/agent/join/", Content_Length=str(len(body))) + body.encode())
    reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:300]  # read and judged: an unknown field
