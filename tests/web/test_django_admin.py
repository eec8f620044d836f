"""The Django admin shows lifecycle rows but never writes them itself: a domain's phase, its
members, the channel ledger, the audit log and a tray's state change only through the
services, and the admin's actions call those services (events and all)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.audit.models import Event
from domains.computedomains.models import ChannelAllocation, ComputeDomain, DomainMember, Phase
from domains.inventory.models import Node, NodeState
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def test_a_domain_is_shown_in_the_admin_but_its_phase_cannot_be_changed_there(
    client, admin, ready_domain
):
    client.force_login(admin)
    url = reverse("admin:computedomains_computedomain_change", args=[ready_domain.pk])
    page = client.get(url)
    assert page.status_code == 200 and ready_domain.name in page.content.decode()
    assert client.post(url, {"phase": Phase.FAILED, "num_nodes": 9}).status_code == 403
    ready_domain.refresh_from_db()
    assert (ready_domain.phase, ready_domain.num_nodes) == (Phase.READY, 2)


@pytest.mark.parametrize("model", [ComputeDomain, DomainMember, ChannelAllocation, Event])
def test_lifecycle_rows_cannot_be_added_or_deleted_in_the_admin(client, admin, ready_domain, model):
    client.force_login(admin)
    meta = model._meta
    assert client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_add")).status_code == 403
    row = model.objects.order_by("pk").first()
    delete = reverse(f"admin:{meta.app_label}_{meta.model_name}_delete", args=[row.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=row.pk).exists()


def test_a_trays_state_cannot_be_edited_in_the_admin(client, admin, topology):
    node = Node.objects.order_by("slot").first()
    client.force_login(admin)
    url = reverse("admin:inventory_node_change", args=[node.pk])
    form = client.get(url).content.decode()
    assert 'name="state"' not in form and 'name="rack"' not in form
    post = client.post(url, {"state": NodeState.DOWN, "rack": node.rack_id, "slot": node.slot})
    assert post.status_code == 403
    node.refresh_from_db()
    assert node.state == NodeState.READY


def test_marking_a_tray_down_from_the_admin_goes_through_the_service(client, admin, ready_domain):
    member = ready_domain.members.select_related("node").order_by("index").first()
    client.force_login(admin)
    client.post(  # a tray whose domain runs is drained first, as on the page
        reverse("admin:inventory_node_changelist"),
        {"action": "node_drain", "_selected_action": [member.node_id]},
    )
    response = client.post(
        reverse("admin:inventory_node_changelist"),
        {"action": "node_mark_down", "_selected_action": [member.node_id]},
    )
    assert response.status_code == 302
    member.node.refresh_from_db()
    assert member.node.state == NodeState.DOWN
    event = Event.objects.get(verb="node.marked_down", node=member.node)
    assert (event.actor_name, event.message) == ("admin", "from the Django admin")
    ready_domain.refresh_from_db()
    assert ready_domain.phase == Phase.DEGRADED  # the lifecycle heard of it


def test_releasing_from_the_admin_goes_through_the_service(client, admin, tenant_a, ns_a, topology):
    domain = form(request_domain(ns_a, tenant_a, "spare", num_nodes=2))
    client.force_login(admin)
    client.post(
        reverse("admin:computedomains_computedomain_changelist"),
        {"action": "release", "_selected_action": [domain.pk]},
    )
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASING
    assert Event.objects.filter(verb="domain.release_requested", domain=domain).exists()
