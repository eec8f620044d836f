"""Before a transactional test's flush, the suite waits for other sessions to let go of the
test database's tables (tests/support/quiet.py): the flush then never meets them halfway."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from domains.inventory.models import Node
from tests.support.quiet import others_hold_locks, wait_for_quiet_database

pytestmark = pytest.mark.django_db(transaction=True)


def hold_a_table(held: threading.Event, release: threading.Event, released: list[float]) -> None:
    """Another session (this thread's own connection) reads the tray table inside a
    transaction, as a server's request would, and keeps its lock until told to commit."""
    try:
        with transaction.atomic():
            Node.objects.count()
            held.set()
            release.wait(10)
        released.append(time.monotonic())
    finally:
        connection.close()


def holder(release: threading.Event) -> tuple[threading.Thread, list[float]]:
    held, released = threading.Event(), []
    thread = threading.Thread(target=hold_a_table, args=(held, release, released))
    thread.start()
    assert held.wait(10), "the other session never took its lock"
    return thread, released


def test_the_wait_ends_once_the_other_session_lets_go():
    release = threading.Event()
    thread, released = holder(release)
    assert others_hold_locks()
    threading.Timer(0.3, release.set).start()
    wait_for_quiet_database(timeout_s=10)
    done = time.monotonic()
    thread.join()
    assert released and released[0] <= done
    assert not others_hold_locks()


def test_a_session_that_never_lets_go_is_left_to_the_flush_with_a_warning(caplog):
    release = threading.Event()
    thread, _ = holder(release)
    try:
        with caplog.at_level("WARNING", logger="tests.support.quiet"):
            wait_for_quiet_database(timeout_s=0.2)
        assert others_hold_locks()
        assert "still hold table locks" in caplog.text
    finally:
        release.set()
        thread.join()
