"""The connection pool's health check (`DB_POOL_CHECK`), paid only where it can find something.

psycopg_pool's own check sends an empty query on every checkout: a round trip, ~40 µs of
the web's CPU and the loopback's latency on each of the agents' heartbeats, which are one
statement each. A connection that PostgreSQL closed (a restart, `pg_ctl -m fast`, a
failover, `pg_terminate_backend`) has something waiting on its socket: the server's
"terminating connection" message, or the end of the stream. So a checkout looks at the
socket (a `poll` with no wait, no round trip) and asks the server only when there is
something to read or the connection was last checked out more than `CHECK_IDLE_S` ago (a
peer that vanished without closing, a NAT that forgot it). What the check cannot see (a
connection lost within those seconds without a word) the request's own retry covers: reads
and writes through Django run again (portal/outage.py), the agents' fast path once
(portal/api/agent/fastpath.py).
"""

from __future__ import annotations

import select
import time
from typing import Any

from psycopg_pool import ConnectionPool

# A connection idle longer than this is asked with an empty query before it is handed out.
CHECK_IDLE_S = 5.0
_CHECKED_AT = "_portal_checked_at"


def check_connection(conn: Any) -> None:
    """Raise when `conn` must not be handed out (the pool then discards it and takes another);
    the pool's `check` callback."""
    now = time.monotonic()
    last = getattr(conn, _CHECKED_AT, None)
    setattr(conn, _CHECKED_AT, now)
    if last is not None and now - last <= CHECK_IDLE_S and not _has_input(conn):
        if conn.closed:
            raise ConnectionError("the connection is closed")
        return
    ConnectionPool.check_connection(conn)


def _has_input(conn: Any) -> bool:
    """Something to read on an idle connection: the server said goodbye (or closed it)."""
    try:
        fd = conn.fileno()
    except Exception:
        return True  # no socket to look at: let the real check decide
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
