from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.support.webhooks import Hooks


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    server = Hooks()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
