# SPDX-License-Identifier: Apache-2.0
"""Small file helpers: atomic writes (readers never see half a config) and JSON state."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str, mode: int = 0o644, *, durable: bool = True) -> bool:
    """Write via a temp file + rename; returns False when the content was already there.

    Readers never see half a file either way. `durable` adds an fsync before the rename, so
    that the new content also survives a power loss; files the agent derives again from the
    desired state at every start (the IMEX config, the CDI spec, a pidfile) do without: on
    a loaded disk an fsync took milliseconds, and formation waited for four of them.

    A file that is a mount point cannot be renamed onto (EBUSY): in a pod, `/etc/hosts` is
    the kubelet's bind mount of its per-pod copy. Such a file is written in place instead,
    the one way its readers can see the new content at all."""
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
    try:
        os.replace(tmp, path)
    except OSError as exc:
        remove(tmp)
        if exc.errno != errno.EBUSY:
            raise
        write_in_place(path, text, durable=durable)
    return True


def write_in_place(path: Path, text: str, *, durable: bool = False) -> None:
    """Overwrite the file itself (same inode): what a bind-mounted file needs."""
    with path.open("r+", encoding="utf-8") as fh:
        fh.write(text)
        fh.truncate()
        if durable:
            fh.flush()
            os.fsync(fh.fileno())


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
