"""Agent-protocol tasks: thin wrappers over one service (the conventions are those of
domains/computedomains/tasks.py). Business code never imports this module: it announces
reports to fold, and `receivers.py` queues the fold."""

from __future__ import annotations

import contextlib

from celery import shared_task
from django.core.cache import cache

from domains.agents.fold import reports_fold
from domains.errors import TransientError, retry_on


@shared_task(name="agents.fold_reports", **retry_on(TransientError))
def fold_reports(domain_id: int) -> int:
    """Fold the latest reports of a domain's members (queued once per burst of reports)."""
    release_fold(domain_id)  # reports landing from now on queue the next fold
    return reports_fold(domain_id=domain_id)


def fold_key(domain_id: int) -> str:
    """The cache key that says "a fold of this domain is queued"."""
    return f"agents:fold-pending:{domain_id}"


def release_fold(domain_id: int) -> None:
    # Redis away: the key expires by itself (receivers.FOLD_PENDING_S).
    with contextlib.suppress(Exception):
        cache.delete(fold_key(domain_id))
