"""A real HTTP server of a test's own (a webhook receiver, a stand-in portal) served on a
thread for as long as a fixture needs it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from socketserver import BaseServer
from typing import TypeVar

S = TypeVar("S", bound=BaseServer)


@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    """`server` answering on a daemon thread; shut down and closed after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
