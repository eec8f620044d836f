"""Every controller task follows one convention: named after its app, acknowledged once
done, and retried only on the errors it names and a lost database (`errors.retry_on`)."""

from __future__ import annotations

import importlib

from domains.errors import DATABASE_AWAY, TransientError, retry_on
from portal.celery import app

APPS = ("computedomains", "agents", "kube", "foresight", "notifications")


def domain_tasks() -> dict[str, object]:
    for label in APPS:
        importlib.import_module(f"domains.{label}.tasks")
    return {
        name: task for name, task in app.tasks.items() if task.__module__.startswith("domains.")
    }


def test_every_task_is_named_after_the_app_it_lives_in():
    tasks = domain_tasks()
    assert len(tasks) >= 10
    misnamed = {
        name: task.__module__
        for name, task in tasks.items()
        if name.split(".")[0] != task.__module__.split(".")[1]
    }
    assert misnamed == {}


def test_every_task_is_acknowledged_late_and_retries_no_bug():
    for name, task in domain_tasks().items():
        assert task.acks_late, name
        retried = getattr(task, "autoretry_for", ())
        assert Exception not in retried and BaseException not in retried, name


def test_retry_on_adds_a_lost_database_to_the_named_errors():
    options = retry_on(TransientError, max_retries=3)
    assert options["autoretry_for"] == (TransientError, *DATABASE_AWAY)
    assert (options["acks_late"], options["max_retries"]) == (True, 3)


def test_notifications_run_on_their_own_queue_and_nothing_else_does():
    """A tenant's webhooks never share the controller's queue (portal/celery.py)."""
    queue = f"{app.conf.task_default_queue}.notifications"
    routed = {name: app.amqp.router.route({}, name)["queue"].name for name in domain_tasks()}
    assert {n for n, q in routed.items() if q == queue} == {
        n for n in routed if n.startswith("notifications.")
    }
    assert {q for n, q in routed.items() if not n.startswith("notifications.")} == {
        app.conf.task_default_queue
    }
