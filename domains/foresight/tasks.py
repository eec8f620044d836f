"""Foresight's Celery tasks: thin, idempotent, retried only on transient trouble."""

from __future__ import annotations

import contextlib

from celery import shared_task
from django.core.cache import cache

from domains.errors import TransientError, retry_on
from domains.foresight.estimates import estimates_refresh

REFRESH_PENDING_KEY = "foresight:refresh-pending"  # "a refresh is queued" (receivers.py)


@shared_task(name="foresight.refresh_estimates", **retry_on(TransientError))
def refresh_estimates() -> int:
    """Forecast the queue and store each waiting domain's placement estimate."""
    # Before reading: a change from now on queues the next refresh. Redis away: the mark
    # expires by itself.
    with contextlib.suppress(Exception):
        cache.delete(REFRESH_PENDING_KEY)
    return estimates_refresh()
