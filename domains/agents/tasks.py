"""Agent-protocol tasks: thin wrappers over one service (the conventions are those of
domains/computedomains/tasks.py). Business code never imports this module: it announces
reports to fold, and `receivers.py` queues the fold."""

from __future__ import annotations

from celery import shared_task

from domains.agents.fold import reports_fold
from domains.bursts import Burst
from domains.errors import TransientError, retry_on


@shared_task(name="agents.fold_reports", **retry_on(TransientError))
def fold_reports(domain_id: int) -> int:
    """Fold the latest reports of a domain's members (queued once per burst of reports)."""
    FOLDS.clear(domain_id)  # reports landing from now on queue the next fold
    return reports_fold(domain_id=domain_id)


# A domain's fold queued (receivers.py); the mark expires after 5 s, one heartbeat's delay.
FOLDS = Burst("agents:fold-pending", pending_s=5)
