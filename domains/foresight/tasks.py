"""Foresight's Celery tasks: thin, idempotent, retried only on transient trouble."""

from __future__ import annotations

from celery import shared_task

from domains.computedomains.tasks import RETRY
from domains.foresight.eta import estimates_refresh


@shared_task(name="foresight.refresh_estimates", **RETRY)
def refresh_estimates() -> int:
    """Forecast the queue and store each waiting domain's placement estimate."""
    return estimates_refresh()
