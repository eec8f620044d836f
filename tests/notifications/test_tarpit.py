"""One tenant's webhooks never stall the controller: deliveries run on the notifications'
own queue and worker (as the Procfile and the chart run them), so a tenant whose 40
webhooks point at a host that accepts and never answers holds the notifications' worker
threads, never the controller's, and another tenant's request is placed meanwhile. A
subscription deleted while its webhook is being sent goes cleanly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings

from domains.notifications.models import Notification, Subscription
from domains.notifications.services import subscription_create, subscription_delete
from portal.celery import app
from testbed import factories
from testbed.processes import SESSION_QUEUE, running, start_notifier, start_worker, wait_until
from tests.support.lifecycle import all_ready, request_domain
from tests.support.webhooks import Tarpit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NOTIFIER_THREADS = 4
# Long tries and no breaker: the tarpit holds every notifier thread for the whole test.
HELD = {
    "PORTAL_WEBHOOK_TIMEOUT_S": "60",
    "PORTAL_WEBHOOK_BREAKER_FAILURES": "1000",
    "PORTAL_NOTIFY_ATTEMPTS": "1",  # no retries left to run into the next test
}


@pytest.fixture(scope="module")
def workers(django_db_setup, django_db_blocker) -> Iterator[tuple]:
    controller = start_worker("controller", concurrency=2, **HELD)
    notifier = start_notifier(concurrency=NOTIFIER_THREADS, **HELD)
    with running(controller, notifier):
        yield controller, notifier


@pytest.fixture
def tarpit() -> Iterator[Tarpit]:
    pit = Tarpit()
    yield pit
    pit.close()


@pytest.fixture
def world(workers, settings, tarpit):  # torn down before the tarpit answers
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = SESSION_QUEUE
    settings.PORTAL = {**django_settings.PORTAL, "SUBSCRIPTIONS_PER_USER": 40}
    factories.make_racks("18", ip_prefix=factories.tray_ip_prefix(21))
    alice, bob = factories.make_user("tarpit-alice"), factories.make_user("tarpit-bob")
    team_a, team_b = factories.make_namespace("tarpit-a"), factories.make_namespace("tarpit-b")
    factories.add_member(alice, team_a, "member")
    factories.add_member(bob, team_b, "member")
    yield (team_a, alice), (team_b, bob)
    # Nothing left for the workers to write while the test's tables are emptied: whatever
    # is queued or under way finds its notification gone.
    for hook in Subscription.objects.all():
        subscription_delete(subscription=hook)
    app.conf.task_default_queue = previous


def placed_by_the_worker(domain):
    def placed() -> bool:
        domain.refresh_from_db()
        return domain.phase == "Forming"

    wait_until(placed, timeout=30, what=f"{domain.name} placed by the controller's worker")
    return domain


def test_a_webhook_tarpit_does_not_delay_another_tenants_request(world, tarpit, workers):
    (team_a, alice), (team_b, bob) = world
    for i in range(40):
        subscription_create(user=alice, channel="webhook", kinds=["domain.ready"],
                            target=f"{tarpit.url}/hook-{i}")  # fmt: skip
    all_ready(placed_by_the_worker(request_domain(team_a, alice, "bait", num_nodes=1)))
    # As many deliveries under way as the controller has threads: had they run there,
    # nothing could be placed now.
    wait_until(lambda: tarpit.holding() >= 2, timeout=30, what="the tarpit to fill")

    # The notifier's threads are held by alice's receiver; bob's request goes through.
    domain = all_ready(placed_by_the_worker(request_domain(team_b, bob, "work", num_nodes=2)))
    assert domain.phase == "Ready"
    assert tarpit.holding() >= 2  # still held: nothing waited for them
    assert Notification.objects.filter(subscription__user=alice, status="delivered").count() == 0
    controller, notifier = workers
    assert "IntegrityError" not in controller.log() + notifier.log()


def test_a_subscription_deleted_while_its_webhook_is_sent_goes_cleanly(world, tarpit, workers):
    (team_a, alice), _ = world
    hook = subscription_create(user=alice, channel="webhook", kinds=["domain.ready"],
                               target=f"{tarpit.url}/once")  # fmt: skip
    all_ready(placed_by_the_worker(request_domain(team_a, alice, "bait2", num_nodes=1)))
    wait_until(lambda: tarpit.holding() >= 1, timeout=30, what="the delivery to be under way")

    subscription_delete(subscription=hook)  # while the worker waits for the answer
    tarpit.release()  # the answer comes: the try belongs to a notification that is gone
    wait_until(lambda: "'gone'" in workers[1].log(), timeout=30, what="the try to end")
    assert not Subscription.objects.filter(pk=hook.pk).exists()
    log = workers[1].log()
    assert "IntegrityError" not in log and "Traceback" not in log, log[-3000:]
