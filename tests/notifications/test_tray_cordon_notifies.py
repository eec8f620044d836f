"""A cordon or a drain of a tray under a running domain is told to its tenants (a line in
the domain's timeline, then a notification), with what it means and the operator's note;
a tray with no domain on it tells nobody, and a repeated cordon tells nobody twice."""

from __future__ import annotations

import pytest

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.trays import tray_act
from domains.inventory.models import Node
from domains.notifications.dispatch import notify_event
from domains.notifications.services import subscription_create
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def notify_all() -> int:
    return sum(notify_event(event_id=pk) for pk in Event.objects.values_list("pk", flat=True))


def subscribe(user):
    return subscription_create(user=user, channel="in_app", kinds=["domain.tray_cordoned"])


def test_draining_a_tray_of_a_running_domain_notifies_its_tenant_with_the_operators_note(
    topology, ns_a, tenant_a, tenant_b, operator
):
    mine, theirs = subscribe(tenant_a), subscribe(tenant_b)
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    tray = domain.members.filter(active=True).order_by("index").first().node
    tray_act(actor=Actor.for_user(operator), node=tray, action="drain", reason="PSU swap Thursday")
    notify_all()
    told = mine.notifications.get()
    assert told.title == "A tray of team-a/train is draining"
    assert tray.hostname in told.body
    assert "keeps running on it until you release it" in told.body
    assert "Operator's note: PSU swap Thursday" in told.body
    assert not theirs.notifications.exists()
    timeline = Event.objects.get(verb="domain.tray_draining", domain=domain)
    assert timeline.details["note"] == "PSU swap Thursday"


def test_cordon_tells_once_and_a_free_tray_tells_nobody(topology, ns_a, tenant_a, operator):
    mine = subscribe(tenant_a)
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    used = {m.node_id for m in domain.members.filter(active=True)}
    tray = Node.objects.get(pk=next(iter(used)))
    free = Node.objects.filter(state="ready").exclude(pk__in=used).first()
    actor = Actor.for_user(operator)
    tray_act(actor=actor, node=tray, action="cordon")
    tray_act(actor=actor, node=free, action="cordon")
    notify_all()
    assert list(mine.notifications.values_list("title", flat=True)) == [
        "A tray of team-a/train is cordoned"
    ]
    with pytest.raises(Exception, match="cordoned already"):
        tray_act(actor=actor, node=tray, action="cordon")
    assert Event.objects.filter(verb="domain.tray_cordoned").count() == 1
