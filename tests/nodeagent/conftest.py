"""Fixtures for the emulator's own tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.nodeagent.emulated import Tray, make_trays, stop_all


@pytest.fixture
def emulated_trays(tmp_path) -> Iterator[Callable[..., list[Tray]]]:
    """`emulated_trays(3, LOG_LEVEL=2)` → trays written, not started; all killed after."""
    made: list[Tray] = []

    def make(count: int, **config: Any) -> list[Tray]:
        trays = make_trays(tmp_path / f"set{len(made)}", count, **config)
        made.extend(trays)
        return trays

    yield make
    stop_all(made)
