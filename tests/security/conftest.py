"""Fixtures for the outside attacks (docs/security.md) run against a real uvicorn server on the test
database: a fabric in this suite's loopback range (127.16 unless TEST_TRAY_IP_BASE moves
it), actors with real bearer tokens, and a joined tray with its real node token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from domains.audit.events import SYSTEM
from domains.tenancy.tokens import token_create
from portal.ratelimit import LOGIN_FAILURES, SIGNIN_PACE, TOKEN_FAILURES
from testbed import factories
from testbed.processes import running, start_server
from tests.support.ratelimits import room_in_window

IP_PREFIX = factories.tray_ip_prefix(16)
JOIN = "dpj_security-test-join-token"


@pytest.fixture
def fabric(db):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    return rack


def bearer(user: Any) -> dict[str, str]:
    _, raw = token_create(actor=SYSTEM, user=user, name="attack")
    return {"Authorization": f"Bearer {raw}"}


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker) -> Iterator[Any]:
    """One uvicorn process per module (it only needs the test database to exist)."""
    proc, url = start_server()
    proc.url = url  # type: ignore[attr-defined]
    with running(proc):
        yield proc


@pytest.fixture
def http(server, transactional_db) -> Iterator[httpx.Client]:
    """A client of the module's server; every test starts with no failures counted."""
    for limit in (LOGIN_FAILURES, TOKEN_FAILURES, SIGNIN_PACE):
        limit.reset("127.0.0.1")
    room_in_window(LOGIN_FAILURES, TOKEN_FAILURES)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
