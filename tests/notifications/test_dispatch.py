"""From the audit trail to notifications: who hears of what, once, and never of another
namespace (the matching itself; tests/notifications/test_delivery.py runs the real worker)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain
from domains.computedomains.services import domain_approve
from domains.foresight.maintenance import maintenance_schedule
from domains.notifications.dispatch import notify_event, scan_ahead
from domains.notifications.models import Notification
from domains.notifications.services import subscription_create
from domains.tenancy.models import Membership
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db
ALL = ["domain.ready", "domain.degraded", "domain.failed", "lease.ending",
       "approval.asked", "approval.decided", "maintenance"]  # fmt: skip


def subscribe(user, **kw):
    kw.setdefault("channel", "in_app")
    kw.setdefault("kinds", ALL)
    return subscription_create(user=user, **kw)


def notify_all() -> int:
    return sum(notify_event(event_id=pk) for pk in Event.objects.values_list("pk", flat=True))


def test_ready_reaches_the_namespace_and_operators_but_not_another_tenant(
    topology, ns_a, tenant_a, tenant_b, operator
):
    mine, theirs, ops = subscribe(tenant_a), subscribe(tenant_b), subscribe(operator)
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    notify_all()
    assert list(mine.notifications.values_list("title", flat=True)) == ["team-a/train is Ready"]
    assert not theirs.notifications.exists()
    assert ops.notifications.filter(kind="domain.ready").count() == 1


def test_nothing_is_sent_twice_for_one_event(topology, ns_a, tenant_a):
    mine = subscribe(tenant_a)
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    first = notify_all()
    assert first == 1 and notify_all() == 0
    assert mine.notifications.count() == 1


def test_visibility_is_checked_when_sending_not_when_subscribing(topology, ns_a, tenant_a):
    mine = subscribe(tenant_a, namespace="team-a")
    Membership.objects.filter(user=tenant_a).delete()  # removed from the namespace since
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    assert notify_all() == 0 and not mine.notifications.exists()


def test_only_the_kinds_asked_for_and_only_the_namespace_named(
    topology, ns_a, tenant_a, ns_b, tenant_b, operator
):
    only_failed = subscribe(operator, kinds=["domain.failed"])
    only_b = subscribe(operator, namespace="team-b")
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    notify_all()
    assert not only_failed.notifications.exists() and not only_b.notifications.exists()


def test_degraded_names_the_tray(topology, ns_a, tenant_a):
    from domains.inventory.services import node_mark_down

    mine = subscribe(tenant_a, kinds=["domain.degraded"])
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    tray = domain.members.order_by("index").first().node
    node_mark_down(actor=Actor(kind="user", name="operator"), node=tray, reason="PSU fault")
    notify_all()
    (told,) = mine.notifications.all()
    assert told.title == "team-a/train is Degraded" and tray.hostname in told.body


def test_approval_asked_and_decided(topology, ns_a, tenant_a, admin):
    ns_a.quota.approval_above_nodes = 2
    ns_a.quota.save()
    asked, mine = subscribe(admin, kinds=["approval.asked"]), subscribe(tenant_a)
    big = request_domain(ns_a, tenant_a, "big", num_nodes=4)
    notify_all()
    assert asked.notifications.get().title == "team-a/big waits for an admin's approval"
    domain_approve(actor=Actor.for_user(admin), domain=big)
    notify_all()
    assert mine.notifications.filter(kind="approval.decided").get().title == (
        "team-a/big was approved"
    )


def test_a_lease_ending_and_maintenance_ahead_are_told_once(topology, ns_a, tenant_a, operator):
    mine = subscribe(tenant_a, lease_warning_hours=2, maintenance_warning_hours=6)
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2, lifetime=timedelta(hours=3)))
    assert scan_ahead() == 0  # the lease ends in 3 h: not yet within 2 h
    later = timezone.now() + timedelta(hours=1, minutes=5)
    assert scan_ahead(now=later) == 1 and scan_ahead(now=later) == 0
    lease = mine.notifications.get(kind="lease.ending")
    assert lease.title.startswith("team-a/train lease ends") and lease.domain == domain
    trays = list(domain.members.values_list("node__hostname", flat=True))
    maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=timezone.now() + timedelta(hours=2),
        ends_at=timezone.now() + timedelta(hours=4),
        reason="cable cartridge",
        trays=trays[:1],
    )
    assert scan_ahead() == 1 and scan_ahead() == 0
    ahead = mine.notifications.get(key__startswith="maintenance-ahead:")
    assert "cable cartridge" in ahead.body and trays[0] in ahead.body


def test_a_subscription_to_another_namespace_is_refused_naming_the_field(ns_a, tenant_b):
    from domains.errors import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        subscription_create(user=tenant_b, channel="in_app", kinds=["domain.ready"],
                            namespace="team-a")  # fmt: skip
    assert refused.value.field == "namespace"
    for bad, field in [({"channel": "pigeon"}, "channel"), ({"kinds": ["x"]}, "kinds"),
                       ({"channel": "webhook", "target": "ftp://x"}, "target"),
                       ({"channel": "email", "target": "not-an-address"}, "target"),
                       ({"lease_warning_hours": 0}, "lease_warning_hours")]:  # fmt: skip
        args = {"channel": "in_app", "kinds": ["domain.ready"], **bad}
        with pytest.raises(InvalidInput) as error:
            subscription_create(user=tenant_b, **args)
        assert error.value.field == field
    assert not Notification.objects.exists() and ComputeDomain.objects.count() == 0
