"""The Celery app: the controller's workers and beat, and the notifications' worker.

The request id travels in the task headers, so logs of one domain's story line up across
web, worker and agent.
"""

from __future__ import annotations

import logging.config
import os
from typing import Any

from celery import Celery, Task, signals

from domains.context import get_request_id, set_request_id

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    [
        "domains.computedomains",
        "domains.inventory",
        "domains.agents",
        "domains.kube",
        "domains.foresight",
        "domains.notifications",
        "portal.receipts",
    ]
)

import portal.worker_consumer  # noqa: E402, F401  # kombu 5.7.0's lost-Redis guard, web too
from portal.worker_health import WorkerHealth  # noqa: E402

app.steps["worker"].add(WorkerHealth)


@signals.setup_logging.connect
def _logging_as_configured(**_: object) -> None:
    """Workers and beat log as the web does, by settings.LOGGING (LOG_LEVEL, LOG_FORMAT,
    request ids, periodic tasks' runs at DEBUG): a receiver here is Celery's documented way to
    keep it from setting up its own handlers and level (`--loglevel` then changes nothing)."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


def notifications_queue() -> str:
    """The notifications' own queue: e-mail and webhook deliveries, and matching events to
    subscriptions. Beside the controller's (the default queue), never on it: a tenant's
    webhooks to a host that never answers must not hold the workers that place everyone's
    domains, and no tenant action can fill the controller's queue. Named after the default
    queue, so the tests' per-session queues get theirs too."""
    return f"{app.conf.task_default_queue}.notifications"


def route_task(name: str, *args: Any, **kwargs: Any) -> dict[str, str] | None:
    """CELERY_TASK_ROUTES: the notifications' tasks to their queue; the rest by default."""
    if name.startswith("notifications."):
        return {"queue": notifications_queue()}
    return None


@signals.before_task_publish.connect
def _carry_request_id(headers: dict | None = None, **_: object) -> None:
    if headers is not None and get_request_id():
        headers.setdefault("request_id", get_request_id())


@signals.task_prerun.connect
def _restore_request_id(task: Task[Any, Any] | None = None, **_: object) -> None:
    rid = getattr(task.request, "request_id", None) if task is not None else None
    set_request_id(rid or "")
