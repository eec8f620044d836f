"""Logging helpers: every record carries the current request id."""

from __future__ import annotations

import logging

from domains.context import get_request_id


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = get_request_id() or "-"
        return True
