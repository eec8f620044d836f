"""The portal's health starts each test from nothing recorded: no agent call failures (in
Redis or this process), no worker stamp."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from domains.health import calls, workers


@pytest.fixture(autouse=True)
def nothing_recorded():
    def forget() -> None:
        index = cache.get(calls.INDEX_KEY) or []
        cache.delete_many([calls.INDEX_KEY, workers.KEY, *(calls._key(i) for i in index)])
        calls.forget_local()

    forget()
    yield
    forget()
