"""The pool's checkout check (portal/postgres/pool.py) asks the server only when it can find
something: a connection used moments ago is handed out without a round trip, one the server
closed is refused, one idle for longer is asked."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from portal.postgres import pool

pytestmark = pytest.mark.django_db


class Spy:
    """A real connection that counts the checks' queries."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn, self.queries = conn, 0
        self.autocommit = True

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def fileno(self) -> int:
        return self.conn.fileno()

    def execute(self, query: str) -> None:
        self.queries += 1
        self.conn.execute(query)


def connect() -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("prepare_threshold", None)
    return psycopg.connect(**params, autocommit=True)


def test_a_connection_just_used_is_not_asked_one_the_server_closed_is_refused():
    with connect() as conn, connect() as admin:
        spy = Spy(conn)
        pool.check_connection(spy)
        assert spy.queries == 1  # never checked before: asked
        pool.check_connection(spy)
        pool.check_connection(spy)
        assert spy.queries == 1  # moments later: no round trip
        pid = conn.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 10
        while not pool._has_input(spy) and time.monotonic() < deadline:
            time.sleep(0.01)  # the server's goodbye is on its way
        with pytest.raises(psycopg.OperationalError):
            pool.check_connection(spy)  # something to read: asked, and it is dead


def test_a_connection_idle_for_longer_is_asked(monkeypatch):
    with connect() as conn:
        spy = Spy(conn)
        pool.check_connection(spy)
        monkeypatch.setattr(pool, "CHECK_IDLE_S", 0.0)
        time.sleep(0.01)
        pool.check_connection(spy)
        assert spy.queries == 2


def test_the_portals_pool_uses_this_check():
    assert connection.pool is not None
    assert connection.pool._check is pool.check_connection
