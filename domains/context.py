"""Request id carried from the HTTP request through Celery tasks to agent actions.

A context variable, so it is correct per thread and per asyncio task.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from contextvars import ContextVar

_request_id: ContextVar[str] = ContextVar("request_id", default="")


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


def get_request_id() -> str:
    return _request_id.get()


def set_request_id(value: str) -> None:
    _request_id.set(value)


@contextlib.contextmanager
def request_id_scope(value: str | None) -> Iterator[str]:
    token = _request_id.set(value or new_request_id())
    try:
        yield _request_id.get()
    finally:
        _request_id.reset(token)
