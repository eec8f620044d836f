"""Celery's lines for each run of a periodic task (beat's "Sending due task", the worker's
"received" and "succeeded") are DEBUG: at INFO beat and the worker say only what happens.
Other tasks' lines, retries and failures are as they were. The records are made by Celery's
own code, as in a worker and a beat."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from celery import beat
from celery.app import trace

from domains.computedomains.tasks import place_queued
from portal.celery import app
from portal.logging import PeriodicTaskChatter
from testbed.processes import SESSION_QUEUE, running, start_beat, start_worker, wait_until

PERIODIC = "computedomains.reconcile"
OTHER = "computedomains.place_domain"


@pytest.fixture
def console() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A console handler with the portal's filter, on the root logger (whose level the test
    sets, as LOG_LEVEL does)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(PeriodicTaskChatter(periodic=[PERIODIC]))
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    yield root, stream
    root.removeHandler(handler)
    root.setLevel(level)


def run_of(name: str, **more: Any) -> dict[str, Any]:
    return {"id": "6f1c", "name": name, "return_value": "0", "runtime": 0.01, **more}


def test_at_info_a_periodic_tasks_run_says_nothing_and_any_other_task_says_it_ran(console):
    root, stream = console
    root.setLevel(logging.INFO)
    trace.info(trace.LOG_SUCCESS, run_of(PERIODIC))
    trace.info(trace.LOG_SUCCESS, run_of(OTHER))
    assert stream.getvalue().splitlines() == [
        f"INFO celery.app.trace Task {OTHER}[6f1c] succeeded in 0.01s: 0"
    ]


def test_at_debug_a_periodic_tasks_run_is_told_as_debug(console):
    root, stream = console
    root.setLevel(logging.DEBUG)
    trace.info(trace.LOG_SUCCESS, run_of(PERIODIC))
    assert (
        stream.getvalue() == f"DEBUG celery.app.trace Task {PERIODIC}[6f1c] succeeded in 0.01s: 0\n"
    )


def test_a_periodic_tasks_retry_is_still_told_at_info(console):
    root, stream = console
    root.setLevel(logging.INFO)
    trace.info(trace.LOG_RETRY, run_of(PERIODIC, exc="TransientError('database away')"))
    assert stream.getvalue().startswith(f"INFO celery.app.trace Task {PERIODIC}[6f1c] retry:")


class OfflineScheduler(beat.Scheduler):
    """Beat's own scheduler, sending nowhere: what it logs is what a running beat logs."""

    def apply_async(self, entry: beat.ScheduleEntry, *args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(id="6f1c")


@pytest.mark.parametrize(("level", "told"), [(logging.INFO, False), (logging.DEBUG, True)])
def test_beat_sending_a_periodic_task_is_debug(console, level, told):
    root, stream = console
    root.setLevel(level)
    scheduler = OfflineScheduler(app, lazy=True)
    entry = beat.ScheduleEntry(name="reconcile", task=PERIODIC, schedule=5.0, app=app)
    scheduler.apply_entry(entry)
    sending = f"DEBUG celery.beat Scheduler: Sending due task reconcile ({PERIODIC})"
    assert (sending in stream.getvalue().splitlines()) is told
    assert "INFO" not in stream.getvalue()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_and_beat_keep_periodic_runs_at_debug_and_the_rest_at_info():
    worker = start_worker("quiet-worker", concurrency=1, LOG_LEVEL="DEBUG")
    schedule = start_beat(LOG_LEVEL="INFO")
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = SESSION_QUEUE
    try:
        with running(schedule, worker):
            place_queued.delay()  # not periodic: told at INFO

            def seen() -> bool:
                log = worker.log()
                return f"{PERIODIC}[" in log and "place_queued[" in log and "succeeded" in log

            wait_until(seen, timeout=30, what="a periodic and another task run")
            worker_log, beat_log = worker.log(), schedule.log()
    finally:
        app.conf.task_default_queue = previous
    runs = [line for line in worker_log.splitlines() if re.search(r"\] (received|succeeded)", line)]
    periodic = [line for line in runs if f"{PERIODIC}[" in line]
    other = [line for line in runs if "computedomains.place_queued[" in line]
    assert periodic and all(" DEBUG celery." in line for line in periodic), periodic
    assert len(other) == 2 and all(" INFO celery." in line for line in other), other
    assert "beat: Starting" in beat_log and "Sending due task" not in beat_log, beat_log[-2000:]
