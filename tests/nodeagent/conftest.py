"""Fixtures for the emulator's own tests."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nodeagent.emulated import Tray, make_trays, stop_all

STANDIN_SOURCE = Path(__file__).resolve().parents[2] / "testbed/nvml_standin.c"


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


@pytest.fixture(scope="session")
def nvml_standin(tmp_path_factory) -> Path:
    """A driver root whose libnvidia-ml.so.1 is the test stand-in (built with the C compiler)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the NVML stand-in")
    root = tmp_path_factory.mktemp("driver-root")
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    target = libdir / "libnvidia-ml.so.580.82.07"
    subprocess.run(
        [
            compiler,
            "-shared",
            "-fPIC",
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            target,
            STANDIN_SOURCE,
        ],
        check=True,
    )
    (libdir / "libnvidia-ml.so.1").symlink_to(target.name)
    (libdir / "libc.so.6").write_text("the driver root's own libc: never on our loader path")
    return root
