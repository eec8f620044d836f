"""The portal's health condition: ok, degraded or down, and why, read from the real
database and Redis."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone

from agentwire.messages import status_report
from domains.agents.heartbeats import agent_report
from domains.health import calls, workers
from domains.health.condition import DEGRADED, DOWN, OK, portal_health
from domains.health.trays import tray_trouble
from domains.inventory.models import Node
from testbed import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def rack(db):
    return factories.make_racks("2", ip_prefix=factories.tray_ip_prefix(13))[0]


def a_worker_runs(seconds_ago: float = 0) -> None:
    cache.set(workers.KEY, {"name": "celery@w1", "at": time.time() - seconds_ago}, 60)


def tray(rack, slot: int = 1) -> Node:
    return Node.objects.get(rack=rack, slot=slot)


def test_it_is_ok_when_everything_answers_and_a_worker_checked_in(rack):
    a_worker_runs()
    health = portal_health()
    assert health.status == OK and health.reasons == () and health.summary() == "all well"


def test_no_worker_ever_seen_degrades_it(rack):
    health = portal_health()
    assert health.status == DEGRADED
    assert health.parts == ["workers"]
    assert "No Celery worker has checked in" in health.reasons[0].text


def test_a_worker_silent_past_the_limit_degrades_it_and_says_how_long(rack):
    a_worker_runs(seconds_ago=workers.STALE_S + 100)
    health = portal_health()
    assert health.parts == ["workers"]
    assert "for 2 min (last: celery@w1)" in health.reasons[0].text


def test_a_server_error_to_a_trays_agent_degrades_it_naming_the_tray(rack):
    a_worker_runs()
    node = tray(rack)
    calls.agent_call_failed(
        node_id=node.pk, call="desired state", status=500, exc=ValueError("column gone\nmore")
    )
    health = portal_health()
    assert health.status == DEGRADED
    (reason,) = health.reasons
    assert reason.part == "agents" and reason.trays == (node.hostname,)
    assert "1 tray: the portal failed its agent's desired state calls" in reason.text
    failure = calls.failure_of(node.pk)
    assert failure is not None
    assert failure.text == "desired state: HTTP 500 (ValueError: column gone)"


def test_a_failure_no_longer_counts_once_the_agent_stopped_failing_for_a_while(rack):
    a_worker_runs()
    node = tray(rack)
    calls.agent_call_failed(node_id=node.pk, call="facts", status=503, exc=RuntimeError("x"))
    later = timezone.now() + timedelta(seconds=calls.CURRENT_S + 1)
    assert portal_health(now=later).status == OK
    assert calls.failure_of(node.pk) is not None  # the tray page still says when it was


def test_failures_in_a_row_count_up_from_the_first(rack):
    node = tray(rack)
    for _ in range(3):
        calls.agent_call_failed(node_id=node.pk, call="desired state", status=500, exc=KeyError(1))
    failure = calls.failure_of(node.pk)
    assert failure is not None and failure.count == 3 and failure.since <= failure.at


def test_with_redis_away_a_failure_is_kept_by_the_process_that_saw_it(rack):
    node = tray(rack)
    nowhere = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
        }
    }
    with override_settings(CACHES=nowhere):
        calls.agent_call_failed(node_id=node.pk, call="desired state", status=500, exc=OSError())
        health = portal_health()
    assert health.status == DOWN
    assert health.parts == ["redis", "agents"]
    assert health.reasons[1].trays == (node.hostname,)


def test_an_agent_saying_its_calls_fail_degrades_it_naming_the_tray(rack):
    a_worker_runs()
    node = tray(rack, 2)
    report = status_report(step="idle", link_error="desired state: HTTP 500 Internal Server Error")
    agent_report(node=node, report=report)
    health = portal_health()
    assert health.parts == ["agents"]
    assert health.reasons[0].trays == (node.hostname,)
    assert "1 tray: its agent says its calls to the portal fail" in health.reasons[0].text
    agent_report(node=node, report=status_report(step="idle"))  # its fetch works again
    assert portal_health().status == OK


def test_a_tray_page_says_what_its_agent_says_with_the_daemons_last_lines(rack):
    node = tray(rack)
    error = "nvidia-imex exited (exit code 1); restarted it\nIts log ends:\nbind: Address in use"
    agent_report(
        node=node,
        report=status_report(step="failed", error=error, link_error="facts: HTTP 502 Bad Gateway"),
    )
    node.refresh_from_db()
    trouble = tray_trouble(node)
    assert trouble.bad
    assert trouble.says == "facts: HTTP 502 Bad Gateway"
    assert trouble.error == "nvidia-imex exited (exit code 1); restarted it"
    assert trouble.log_lines == "bind: Address in use"


def test_a_tray_whose_agent_is_fine_has_nothing_to_say(rack):
    node = tray(rack)
    agent_report(node=node, report=status_report(step="idle"))
    node.refresh_from_db()
    assert not tray_trouble(node).bad


def test_several_trays_are_counted_and_named_with_every_call_that_failed(rack):
    a_worker_runs()
    first, second = tray(rack, 1), tray(rack, 2)
    calls.agent_call_failed(node_id=first.pk, call="desired state", status=500, exc=KeyError(1))
    calls.agent_call_failed(node_id=second.pk, call="facts", status=500, exc=KeyError(2))
    (reason,) = portal_health().reasons
    assert reason.text.startswith(
        "2 trays: the portal failed their agents' desired state and facts calls"
    )
    assert reason.trays == (first.hostname, second.hostname) and reason.more == 0
