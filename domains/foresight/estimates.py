"""Placement estimates for the domains waiting in the queue, kept fresh.

`estimates_refresh()` runs the forecast (`domains.computedomains.forecast`, the queue
simulated forward with the controller's own `plan()`) and stores one `PlacementEstimate`
per waiting domain: a few queries and one simulation for the whole queue, however long,
so pages and the API only read a row. It runs on beat (PORTAL_ESTIMATE_SECONDS) and after
every change that moves the queue (a domain queued or approved, capacity freed, a
maintenance window called off); see `receivers`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone

from domains.computedomains.forecast import queue_forecast
from domains.computedomains.models import ComputeDomain, Phase
from domains.foresight.models import PlacementEstimate

WAITING = (Phase.PENDING, Phase.ADMITTED)


def estimates_refresh(*, now: datetime | None = None) -> int:
    """Forecast the queue and store it; returns how many domains wait."""
    now = now or timezone.now()
    answers = queue_forecast(now=now)
    with transaction.atomic():
        PlacementEstimate.objects.exclude(domain_id__in=list(answers)).delete()
        # A domain that left the queue since the forecast read it has no row to keep.
        waiting = set(
            ComputeDomain.objects.filter(pk__in=list(answers), phase__in=WAITING).values_list(
                "pk", flat=True
            )
        )
        rows = [
            PlacementEstimate(
                domain_id=pk,
                estimated_at=datetime.fromtimestamp(a.at, UTC) if a.at is not None else None,
                reason=a.reason,
                message=a.message[:500],
                computed_at=now,
            )
            for pk, a in answers.items()
            if pk in waiting
        ]
        # One statement that inserts or updates: two refreshes at once cannot collide.
        PlacementEstimate.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["domain"],
            update_fields=["estimated_at", "reason", "message", "computed_at"],
        )
    return len(rows)
