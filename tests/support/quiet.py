"""A transactional test ends by emptying the database (pytest-django's flush: one TRUNCATE
of every table). The server, worker and agents a module keeps running may still be busy
then: a page's last request, a task the test set off. A statement of theirs that locks one
table and then waits for another while the TRUNCATE holds the second and waits for the
first is a deadlock, and PostgreSQL may pick the flush to fail.

Before the flush, wait until no other session holds a lock on a table of the test
database: what they were doing has finished, and the TRUNCATE starts alone.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, connection

log = logging.getLogger(__name__)

POLL_S = 0.05

# Relation locks of other sessions in this database; a catalog read of this very query
# is not counted (it is this session's).
LOCKS_HELD = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'relation'
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid <> pg_backend_pid()
"""


def others_hold_locks() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(LOCKS_HELD)
        (count,) = cursor.fetchone()
    return bool(count)


def wait_for_quiet_database(timeout_s: float = 10.0) -> None:
    """Return once no other session holds a table lock, or after `timeout_s`. Best
    effort: a database that is away (a test stopped it) is left to the flush."""
    started = time.monotonic()
    try:
        while others_hold_locks():
            if time.monotonic() - started > timeout_s:
                log.warning("other sessions still hold table locks after %.0f s", timeout_s)
                break
            time.sleep(POLL_S)
    except DatabaseError:
        pass
