"""Operators are told when the portal's health turns bad and when it recovers: once each way,
only once the change has lasted, never a flood while it flaps, and tenants never."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.health.condition import DEGRADED, DOWN, OK, PortalHealth, Reason
from domains.notifications import health as watch
from domains.notifications.models import HealthAlarm, Notification
from domains.notifications.services import subscription_create
from portal.web.forms import SubscriptionForm

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0)
SICK = PortalHealth(
    DEGRADED,
    (Reason("agents", "1 tray: the portal failed their agents' desired state calls.", ("t1",)),),
)
WELL = PortalHealth(OK)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def listeners(operator, tenant_a):
    ops = subscription_create(user=operator, channel="in_app", kinds=["portal.health"])
    tenant = subscription_create(user=tenant_a, channel="in_app", kinds=["portal.health"])
    return ops, tenant


def told(subscription) -> list[Notification]:
    return list(Notification.objects.filter(subscription=subscription).order_by("created_at"))


def test_a_settled_fault_is_told_to_operators_once_and_its_recovery_once(listeners):
    ops, tenant = listeners
    watch.health_watch(now=at(0), health=WELL)
    watch.health_watch(now=at(1), health=SICK)
    watch.health_watch(now=at(1 + watch.SETTLE_S / 2), health=SICK)
    assert told(ops) == []  # not settled yet
    for t in (2 + watch.SETTLE_S, 3 + watch.SETTLE_S, 60 + watch.SETTLE_S):
        watch.health_watch(now=at(t), health=SICK)
    (bad,) = told(ops)
    assert bad.kind == "portal.health" and bad.namespace is None
    assert bad.title == "Portal degraded: trays' agents cannot reach it"
    assert "desired state" in bad.body and bad.url == "/fabric/"
    assert bad.payload["reasons"][0]["trays"] == ["t1"]

    back = 1000.0
    watch.health_watch(now=at(back), health=WELL)
    watch.health_watch(now=at(back + watch.SETTLE_S + 1), health=WELL)
    watch.health_watch(now=at(back + watch.SETTLE_S + 2), health=WELL)
    assert [n.title for n in told(ops)] == [bad.title, "Portal health recovered"]
    assert told(tenant) == []  # the portal's health is the operators' business


def test_a_condition_that_flaps_faster_than_it_settles_is_never_told(listeners):
    ops, _ = listeners
    for i in range(20):
        health = SICK if i % 2 == 0 else WELL
        watch.health_watch(now=at(i * watch.SETTLE_S / 3), health=health)
    assert told(ops) == []


def test_notices_stay_a_gap_apart_however_often_it_settles(listeners):
    ops, _ = listeners
    watch.health_watch(now=at(0), health=SICK)
    watch.health_watch(now=at(watch.SETTLE_S), health=SICK)  # told: bad
    watch.health_watch(now=at(watch.SETTLE_S + 1), health=WELL)
    watch.health_watch(now=at(2 * watch.SETTLE_S + 2), health=WELL)  # settled, but too soon
    assert len(told(ops)) == 1
    watch.health_watch(now=at(watch.SETTLE_S + watch.GAP_S), health=WELL)
    assert [n.title for n in told(ops)][-1] == "Portal health recovered"


def test_degraded_turning_down_is_the_same_fault_not_a_new_notice(listeners):
    ops, _ = listeners
    down = PortalHealth(DOWN, (Reason("redis", "Redis does not answer."),))
    watch.health_watch(now=at(0), health=SICK)
    watch.health_watch(now=at(watch.SETTLE_S), health=SICK)
    watch.health_watch(now=at(watch.SETTLE_S + 5), health=down)
    watch.health_watch(now=at(watch.SETTLE_S + watch.GAP_S + 5), health=down)
    assert len(told(ops)) == 1
    assert HealthAlarm.objects.get().seen == DOWN


def test_two_watchers_at_once_tell_it_once(listeners):
    ops, _ = listeners
    watch.health_watch(now=at(0), health=SICK)
    stale = HealthAlarm.objects.get()  # what a second process read before the first told
    watch.health_watch(now=at(watch.SETTLE_S), health=SICK)
    watch._tell(stale, SICK, at(watch.SETTLE_S + 1))
    assert len(told(ops)) == 1


def test_with_the_database_away_nothing_is_written(listeners):
    away = PortalHealth(DOWN, (Reason("database", "The database does not answer."),))
    assert watch.health_watch(now=at(0), health=away) is None
    assert not HealthAlarm.objects.exists()


def test_the_subscription_form_offers_the_portals_health_to_operators_only(operator, tenant_a):
    def offered(user) -> list[str]:
        return [value for value, _ in SubscriptionForm(user=user).fields["kinds"].choices]

    assert "portal.health" in offered(operator)
    assert "portal.health" not in offered(tenant_a)
    assert "domain.ready" in offered(tenant_a)
