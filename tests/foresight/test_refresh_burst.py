"""A burst of queue changes (tenants requesting at once, domains released together) queues
one refresh of the estimates, not one each; a change after the refresh began queues the
next one."""

from __future__ import annotations

import json

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from domains import signals
from domains.foresight.tasks import REFRESH_PENDING_KEY, refresh_estimates

pytestmark = pytest.mark.django_db


def queued_refreshes() -> int:
    """refresh_estimates messages waiting in the broker's queue (nobody consumes it here)."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    messages = broker.lrange(settings.CELERY_TASK_DEFAULT_QUEUE, 0, -1)
    return sum(json.loads(m)["headers"]["task"] == "foresight.refresh_estimates" for m in messages)


def test_a_burst_of_queue_changes_queues_one_refresh_and_a_later_change_the_next() -> None:
    cache.delete(REFRESH_PENDING_KEY)
    before = queued_refreshes()
    for _ in range(8):
        signals.placement_wanted.send(sender=None, domain_id=0)
    signals.capacity_freed.send(sender=None)
    assert queued_refreshes() == before + 1

    refresh_estimates()  # the queued refresh runs (here, in-process): the mark is cleared
    signals.capacity_freed.send(sender=None)
    signals.capacity_freed.send(sender=None)
    assert queued_refreshes() == before + 2
