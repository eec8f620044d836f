# SPDX-License-Identifier: Apache-2.0
"""Small file helpers: atomic writes (readers never see half a config) and JSON state."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str, mode: int = 0o644, *, durable: bool = True) -> bool:
    """Write via a temp file + rename; returns False when the content was already there.

    Readers never see half a file either way. `durable` adds an fsync before the rename, so
    that the new content also survives a power loss; files the agent derives again from the
    desired state at every start (the IMEX config, the CDI spec, a pidfile) do without: on
    a loaded disk an fsync took milliseconds, and formation waited for four of them."""
    with contextlib.suppress(FileNotFoundError):
        if path.read_text(encoding="utf-8") == text:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    return True


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`; None when it is absent, unreadable or not an object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
