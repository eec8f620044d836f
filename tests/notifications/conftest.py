from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.serving import serving
from tests.support.webhooks import Hooks


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    with serving(Hooks()) as server:
        yield server
