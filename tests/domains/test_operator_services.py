"""Operator and admin services: tray states, namespaces, quotas, members."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.errors import InvalidInput, InvalidTransition, NameTaken
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon, node_drain, node_mark_down, node_uncordon
from domains.tenancy.models import Membership, Quota
from domains.tenancy.services import (
    membership_remove,
    membership_set,
    namespace_create,
    quota_set,
)
from testbed import factories

pytestmark = pytest.mark.django_db


def test_tray_actions_move_the_state_and_record_who_and_why(topology, operator):
    actor = Actor.for_user(operator)
    node = Node.objects.order_by("slot").first()
    node_cordon(actor=actor, node=node, reason="fan noise")
    node_cordon(actor=actor, node=node, reason="fan noise")  # repeating changes nothing
    node_drain(actor=actor, node=node, reason="replace fan")
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.DRAINING, "replace fan")
    node_mark_down(actor=actor, node=node, reason="fan dead")
    node_uncordon(actor=actor, node=node)
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.READY, "")
    events = list(
        Event.objects.filter(node=node).order_by("id").values_list("verb", "actor_name", "message")
    )
    assert events == [
        ("node.cordoned", "operator", "fan noise"),
        ("node.draining", "operator", "replace fan"),
        ("node.marked_down", "operator", "fan dead"),
        ("incident.opened", "operator", "gb-r01-t01 down: fan dead; 0 domains hit"),
        ("node.uncordoned", "operator", ""),
    ]


def test_a_down_tray_must_come_back_by_uncordon(topology, operator):
    node = Node.objects.order_by("slot").first()
    node_mark_down(actor=Actor.for_user(operator), node=node)
    with pytest.raises(InvalidTransition, match="is down; cannot become cordoned"):
        node_cordon(actor=Actor.for_user(operator), node=node)


def test_a_namespace_is_created_with_its_quota(admin):
    actor = Actor.for_user(admin)
    ns = namespace_create(actor=actor, name="team-c", display_name="Team C", max_gpus=16)
    assert Quota.objects.get(namespace=ns).max_gpus == 16
    with pytest.raises(NameTaken):
        namespace_create(actor=actor, name="team-c")
    with pytest.raises(InvalidInput) as exc:
        namespace_create(actor=actor, name="Team_C")
    assert exc.value.field == "name"
    with pytest.raises(InvalidInput) as exc:
        namespace_create(actor=actor, name="team-d", max_gpus=-1)
    assert exc.value.field == "max_gpus"


def test_quota_changes_name_what_changed(ns_a, admin):
    actor = Actor.for_user(admin)
    quota_set(actor=actor, namespace=ns_a, max_gpus=64, max_lifetime=timedelta(hours=8))
    quota_set(actor=actor, namespace=ns_a, max_gpus=64)  # no change, no event
    quota = Quota.objects.get(namespace=ns_a)
    assert (quota.max_gpus, quota.max_nodes, quota.max_lifetime) == (64, 12, timedelta(hours=8))
    (event,) = Event.objects.filter(verb="quota.set")
    assert event.details == {
        "max_gpus": {"from": 48, "to": 64},
        "max_lifetime": {"from": None, "to": 28800},
    }
    quota_set(actor=actor, namespace=ns_a, max_gpus=None)
    assert Quota.objects.get(namespace=ns_a).max_gpus is None
    with pytest.raises(InvalidInput) as exc:
        quota_set(actor=actor, namespace=ns_a, max_racks=3)
    assert exc.value.field == "max_racks"


def test_members_are_added_changed_and_removed(ns_a, admin):
    actor = Actor.for_user(admin)
    user = factories.make_user("carol")
    membership_set(actor=actor, namespace=ns_a, user=user, role="viewer")
    membership_set(actor=actor, namespace=ns_a, user=user, role="admin")
    assert Membership.objects.get(user=user, namespace=ns_a).role == "admin"
    with pytest.raises(InvalidInput) as exc:
        membership_set(actor=actor, namespace=ns_a, user=user, role="owner")
    assert exc.value.field == "role"
    assert membership_remove(actor=actor, namespace=ns_a, user=user) is True
    assert membership_remove(actor=actor, namespace=ns_a, user=user) is False
    verbs = list(Event.objects.order_by("id").values_list("verb", flat=True))
    assert verbs == ["membership.set", "membership.set", "membership.removed"]
