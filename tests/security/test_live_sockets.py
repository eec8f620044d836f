"""Open websockets follow who may listen, against the real server: a member removed from a
namespace hears nothing more of it on the socket they already had open (4 hints each were
still delivered), a session that logs out closes its sockets, and one user or one tray
cannot hold more than a few sockets open."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from domains.agents.joining import agent_join
from domains.audit.events import SYSTEM
from domains.inventory.models import Node
from domains.tenancy.services import membership_remove, membership_set
from testbed import factories
from testbed.agents import ensure_join_token, node_facts
from testbed.processes import running, start_server
from tests.security.test_signin import PORTAL_LOGIN, sign_in, signed_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sockets() -> Iterator[contextlib.ExitStack]:
    """Every socket a test opens, closed when it ends."""
    with contextlib.ExitStack() as stack:
        yield stack


def opened(stack: contextlib.ExitStack, url: str, **headers: str) -> ClientConnection:
    return stack.enter_context(connect(url, additional_headers=headers, open_timeout=10))


def live_socket(stack, server_url: str, http, topics: str, hello: bool = True) -> ClientConnection:
    """The page's live socket, with the browser's session cookie and Origin."""
    ws = opened(
        stack,
        f"{server_url.replace('http', 'ws', 1)}/ws/live/?topics={topics}",
        Cookie=f"sessionid={http.cookies['sessionid']}",
        Origin=server_url,
    )
    if hello:
        assert json.loads(ws.recv(timeout=10))["kind"] == "hello"
    return ws


def hint_to(namespace) -> None:
    """Something happens in the namespace (an event on it): its groups hear a hint."""
    bystander = factories.make_user()
    membership_set(actor=SYSTEM, namespace=namespace, user=bystander, role="viewer")


def kinds(ws: ClientConnection, timeout: float) -> list[str]:
    got = []
    try:
        while True:
            got.append(json.loads(ws.recv(timeout=timeout))["kind"])
    except TimeoutError:
        return got


def test_a_removed_member_hears_nothing_more_of_the_namespace(
    server, http, sockets, ns_a, tenant_a
):
    assert signed_in(sign_in(http, PORTAL_LOGIN, "alice", tenant_a.raw_password))
    ws = live_socket(sockets, server.url, http, f"namespace:{ns_a.name}")
    hint_to(ns_a)
    assert "event" in kinds(ws, 3)

    membership_remove(actor=SYSTEM, namespace=ns_a, user=tenant_a)
    assert json.loads(ws.recv(timeout=10)) == {"kind": "access", "topics": 0}
    for _ in range(4):
        hint_to(ns_a)
    assert kinds(ws, 2) == []


def test_logging_out_closes_the_sessions_sockets(server, http, sockets, ns_a, tenant_a):
    assert signed_in(sign_in(http, PORTAL_LOGIN, "alice", tenant_a.raw_password))
    ws = live_socket(sockets, server.url, http, f"namespace:{ns_a.name}")
    http.post("/logout/", headers={"X-CSRFToken": http.cookies["csrftoken"]})
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


@pytest.fixture(scope="module")
def capped(django_db_setup, django_db_blocker) -> Iterator[str]:
    proc, url = start_server(PORTAL_SOCKETS_PER_USER="3", PORTAL_SOCKETS_PER_NODE="2")
    with running(proc):
        yield url


def closed_with(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=10)
    return closed.value.rcvd.code if closed.value.rcvd else None


def test_a_user_and_a_tray_hold_at_most_a_few_sockets(capped, sockets, tenant_a, fabric):
    with httpx.Client(base_url=capped, timeout=30) as browser:
        assert signed_in(sign_in(browser, PORTAL_LOGIN, "alice", tenant_a.raw_password))
        pages = [live_socket(sockets, capped, browser, "me") for _ in range(3)]
        over = live_socket(sockets, capped, browser, "me", hello=False)
        assert closed_with(over) == 4429
        pages[0].close()
        live_socket(sockets, capped, browser, "me")  # one closed: room again

    node = Node.objects.filter(rack=fabric).first()
    _, raw = agent_join(join_token=ensure_join_token(), facts=node_facts(node))
    agent_url = f"{capped.replace('http', 'ws', 1)}/ws/agent/"
    for _ in range(2):
        opened(sockets, agent_url, Authorization=f"Node {raw}")
    assert closed_with(opened(sockets, agent_url, Authorization=f"Node {raw}")) == 4429
