"""Notifications on a real Celery worker: events recorded in this process reach the worker
through Redis; webhooks go to a real HTTP server on loopback, e-mail through Django's
file-based backend into a folder this test reads (the worker process and the test both see
it). Also: placement estimates refreshed by the worker when the queue moves."""

from __future__ import annotations

import email
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.foresight.maintenance import maintenance_schedule
from domains.foresight.models import PlacementEstimate
from domains.notifications.delivery import sign
from domains.notifications.models import Notification
from domains.notifications.services import subscription_create
from domains.tenancy.models import Quota
from portal.celery import app
from testbed import factories
from testbed.processes import SESSION_QUEUE, running, start_notifier, start_worker, wait_until
from tests.support.lifecycle import all_ready, request_domain

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def mailbox(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mail")


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, mailbox) -> Iterator[None]:
    """The controller's worker and the notifications' own, as the Procfile runs them."""
    env = {
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(mailbox),
        "PORTAL_NOTIFY_BACKOFF_S": "1",
        "PORTAL_NOTIFY_ATTEMPTS": "3",
        "PORTAL_WEBHOOK_BREAKER_FAILURES": "5",  # /down's three tries keep the receiver open
    }
    controller = start_worker("controller", concurrency=2, **env)
    notifier = start_notifier(concurrency=4, **env)
    with running(controller, notifier):
        yield


@pytest.fixture
def session_queue() -> Iterator[str]:
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = SESSION_QUEUE
    yield SESSION_QUEUE
    app.conf.task_default_queue = previous


@pytest.fixture
def world(worker, session_queue):
    factories.make_racks("18", ip_prefix=factories.tray_ip_prefix(19))
    ns = factories.make_namespace("e2e")
    tenant = factories.make_user("notify-tenant")
    tenant.email = "tenant@example.com"
    tenant.save()
    factories.add_member(tenant, ns, "member")
    other = factories.make_user("notify-other")
    factories.add_member(other, factories.make_namespace("elsewhere"), "member")
    return ns, tenant, other


def formed(domain):
    """The worker places it (as it does every admitted domain); its agents report ready."""

    def placed() -> bool:
        domain.refresh_from_db()
        return domain.phase == "Forming"

    wait_until(placed, timeout=30, what=f"{domain.name} placed by the worker")
    return all_ready(domain)


def mails(mailbox: Path) -> list[email.message.Message]:
    messages = []
    for path in sorted(mailbox.glob("*.log")):
        for chunk in path.read_text().split("-" * 79):
            if chunk.strip():
                messages.append(email.message_from_string(chunk.strip()))
    return messages


def test_ready_reaches_a_signed_webhook_after_a_retry_and_an_email_once(world, hooks, mailbox):
    ns, tenant, other = world
    hooks.script["/hook"] = [500, 200]  # the first try fails: retried with backoff
    hook = subscription_create(user=tenant, channel="webhook", kinds=["domain.ready"],
                               target=f"{hooks.url}/hook")  # fmt: skip
    subscription_create(user=tenant, channel="email", kinds=["domain.ready"])
    subscription_create(user=other, channel="webhook", kinds=["domain.ready"],
                        target=f"{hooks.url}/other")  # fmt: skip

    formed(request_domain(ns, tenant, "train", num_nodes=2))

    wait_until(lambda: len(hooks.on("/hook")) >= 2, timeout=30, what="the webhook retried")
    notification = Notification.objects.get(subscription=hook)
    wait_until(
        lambda: Notification.objects.get(pk=notification.pk).status == "delivered",
        timeout=10,
        what="delivered",
    )
    notification.refresh_from_db()
    assert notification.attempts == 2
    tries = list(notification.delivery_attempts.values_list("status_code", "error"))
    assert tries == [(500, "answered 500"), (200, "")]
    (first_headers, _), (headers, body) = hooks.on("/hook")
    assert headers["X-Portal-Delivery"] == first_headers["X-Portal-Delivery"]
    expected = sign(hook.secret, headers["X-Portal-Timestamp"], body)
    assert headers["X-Portal-Signature"] == expected
    assert abs(int(headers["X-Portal-Timestamp"]) - time.time()) < 60
    payload = json.loads(body)
    assert payload["kind"] == "domain.ready" and payload["namespace"] == "e2e"
    assert payload["title"] == "e2e/train is Ready" and payload["event"] == "domain.ready"

    wait_until(lambda: mails(mailbox), timeout=20, what="the e-mail")
    (mail,) = [m for m in mails(mailbox) if "e2e/train is Ready" in m["Subject"]]
    assert mail["To"] == "tenant@example.com"

    # The same event again (a redelivered task): nothing is sent twice.
    ready = Event.objects.get(verb="domain.ready")
    from domains.notifications.tasks import notify_event

    notify_event.delay(ready.pk)
    time.sleep(3)
    assert len(hooks.on("/hook")) == 2 and len(mails(mailbox)) == 1
    assert hooks.on("/other") == []  # nothing about another namespace


def test_a_webhook_that_keeps_failing_is_given_up_with_every_try_logged(world, hooks):
    ns, tenant, _ = world
    hooks.script["/down"] = [503]
    hook = subscription_create(user=tenant, channel="webhook", kinds=["domain.ready"],
                               target=f"{hooks.url}/down")  # fmt: skip
    formed(request_domain(ns, tenant, "train", num_nodes=2))
    wait_until(
        lambda: Notification.objects.filter(subscription=hook, status="failed").exists(),
        timeout=40,
        what="given up after 3 tries",
    )
    notification = Notification.objects.get(subscription=hook)
    assert notification.attempts == 3 and notification.last_error == "answered 503"
    assert len(hooks.on("/down")) == 3


def test_the_worker_refreshes_estimates_when_the_queue_moves(world):
    ns, tenant, _ = world
    Quota.objects.update(max_gpus=None, max_nodes=None, max_nodes_per_domain=None)
    formed(request_domain(ns, tenant, "big", num_nodes=16))
    queued = request_domain(ns, tenant, "next", num_nodes=4)  # the worker tries to place it
    wait_until(
        lambda: PlacementEstimate.objects.filter(domain=queued, reason="Estimated").exists(),
        timeout=30,
        what="the estimate",
    )


def test_tenants_are_told_of_maintenance_on_their_trays_by_webhook(world, hooks):
    ns, tenant, other = world
    hook = subscription_create(user=tenant, channel="webhook", kinds=["maintenance"],
                               target=f"{hooks.url}/maintenance")  # fmt: skip
    subscription_create(user=other, channel="webhook", kinds=["maintenance"],
                        target=f"{hooks.url}/other")  # fmt: skip
    domain = formed(request_domain(ns, tenant, "train", num_nodes=2, lifetime=timedelta(hours=8)))
    operator = factories.make_user("notify-operator", staff=True)
    maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=timezone.now() + timedelta(hours=1),
        ends_at=timezone.now() + timedelta(hours=3),
        reason="busbar torque check",
        rack="gb-r01",
    )
    wait_until(lambda: hooks.on("/maintenance"), timeout=30, what="the maintenance webhook")
    ((headers, body),) = hooks.on("/maintenance")
    payload = json.loads(body)
    assert payload["kind"] == "maintenance" and payload["domain"]["uid"] == str(domain.uid)
    assert "busbar torque check" in payload["body"]
    assert headers["X-Portal-Signature"] == sign(hook.secret, headers["X-Portal-Timestamp"], body)
    assert hooks.on("/other") == []
