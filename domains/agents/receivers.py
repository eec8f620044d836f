"""What the agent protocol does when the business announces a change (connected by
`apps.ready()`): reports that change members are folded on a worker, once per burst.

A rack's 18 trays report "ready" within milliseconds of each other. The first report of a
burst queues one fold for the domain and marks it pending in the cache; the reports behind
it find the mark and queue nothing, and the fold reads all of them from the trays' rows.
The fold waits FOLD_QUIET_S before it runs, so a burst spread over 100-300 ms is folded two
to four times, not once per report as the worker catches up; Ready comes that much later at
most, but for the burst's last report: once every member has reported ready (or, releasing,
clean), its fold is queued at once. The fold clears the mark before it reads, so a report
that lands meanwhile queues the next one. The mark expires after 5 s (`tasks.FOLDS`), so a fold
lost with a killed worker costs one heartbeat's delay: the tray's next report, still
differing from its member, queues again. When the cache or the broker is away, the report
is folded here and now.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import receiver

from domains import signals
from domains.agents.fold import reports_fold
from domains.agents.selectors import reports_settled
from domains.agents.tasks import FOLDS, fold_reports
from domains.errors import DATABASE_AWAY

log = logging.getLogger(__name__)

# Each fold re-reads every member's report (the worker's largest cost): an 18-tray formation
# and release was folded ~15 times; waiting this long for the rest of a burst should make it a
# few, for at most 50 ms more to Ready.
FOLD_QUIET_S = 0.05


@receiver(signals.member_reports_pending, dispatch_uid="agents.fold_reports")
def queue_fold(sender: object, domain_id: int, **kwargs: Any) -> None:
    settled = _settled(domain_id)
    try:
        if settled:
            # The burst's last report: nothing more to wait for. A fold queued by an
            # earlier report of the burst may still run; it finds nothing left to change.
            fold_reports.apply_async((domain_id,))
        elif FOLDS.mark(domain_id):
            fold_reports.apply_async((domain_id,), countdown=FOLD_QUIET_S)
        return
    except Exception:  # Redis away: the report must not be lost
        log.warning("could not queue agents.fold_reports for %s; folding now", domain_id)
    FOLDS.clear(domain_id)
    reports_fold(domain_id=domain_id)


def _settled(domain_id: int) -> bool:
    """`reports_settled`, False when it cannot be told (the fold then waits as usual)."""
    try:
        return reports_settled(domain_id)
    except DATABASE_AWAY:
        return False
