"""Logging helpers: every record carries the current request id, and Celery's lines for
each run of a periodic task are DEBUG."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping

from celery.app import trace

from domains.context import get_request_id

# celery.beat's line for every task it sends (celery/beat.py, Scheduler.apply_entry).
BEAT_SENDING = "Scheduler: Sending due task %s (%s)"


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = get_request_id() or "-"
        return True


class NoClientErrorTraceback(logging.Filter):
    """An ordinary 4xx (a 403 for a page a tenant may not open, a 404) is logged as one line,
    without the traceback of the PermissionDenied or Http404 that produced it: Django logs
    those with `exc_info`, ~2 KB a refusal, which let anyone fill the logs by asking for
    pages they may not see. 5xx keep their tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and status < 500:
            record.exc_info = None
            record.exc_text = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, request id, message (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        body = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
        }
        for key in ("domain", "node", "task"):
            if hasattr(record, key):
                body[key] = str(getattr(record, key))
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, ensure_ascii=False)


class PeriodicTaskChatter(logging.Filter):
    """Celery logs every run of every task at INFO: beat's "Sending due task", the worker's
    "received" and "succeeded". For beat's periodic tasks that is ~100 lines a minute of
    nothing happening, so those three lines are DEBUG (and dropped unless the root logger
    takes DEBUG); other tasks' lines, and every retry, failure and warning, stay as they are.
    """

    def __init__(self, periodic: Iterable[str] = ()) -> None:
        super().__init__()
        self.periodic = frozenset(periodic)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or _task_of(record) not in self.periodic:
            return True
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            return False  # not even for this handler; the record is left as it came
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


def _task_of(record: logging.LogRecord) -> str | None:
    """The task a record of Celery's per-run lines is about; None for any other record."""
    if record.msg in (trace.LOG_RECEIVED, trace.LOG_SUCCESS) and isinstance(record.args, Mapping):
        return str(record.args.get("name"))  # celery passes the run's context as the args
    if record.msg == BEAT_SENDING and isinstance(record.args, tuple) and len(record.args) == 2:
        return str(record.args[1])  # (entry name, task name)
    return None
