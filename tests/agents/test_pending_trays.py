"""A tray the inventory does not know waits for an operator, and a node token alone cannot
move a tray between cliques: the fleet's join token is on every tray's disk, so holding it
must not be enough to add a tray to a production clique or to move one."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from domains.agents.models import JoinToken
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import Phase
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon, node_mark_down, node_mark_up
from domains.security import hash_token
from testbed import factories
from tests.support.lifecycle import request_and_place

pytestmark = pytest.mark.django_db
JOIN = "dpj_pending-test-join-token"


@pytest.fixture
def rack(db):
    """One rack of 17 trays in one clique: slot 18 is free."""
    (rack,) = factories.make_racks("17", ip_prefix=factories.tray_ip_prefix(14))
    JoinToken.objects.create(name="tests", token_hash=hash_token(JOIN))
    return rack


def rogue_facts(rack, hostname: str = "gb-r01-t99", ip: str = "127.14.9.99") -> dict:
    clique = rack.nodes.first().clique
    return {
        "join_token": JOIN,
        "hostname": hostname,
        "ip": ip,
        "cluster_uuid": clique.cluster_uuid,
        "clique_id": clique.clique_id,
        "driver_version": "580.82.07",
        "channel_major": 237,
        "gpus": [{"index": i, "uuid": f"GPU-rogue-{hostname}-{i}"} for i in range(4)],
    }


def join(body: dict) -> APIClient:
    resp = APIClient().post("/api/v1/agent/join/", body, format="json")
    assert resp.status_code == 201, resp.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['token']}")
    return client


def operator_api() -> APIClient:
    client = APIClient()
    client.force_authenticate(factories.make_user("op", staff=True))
    return client


def test_a_tray_the_inventory_does_not_know_joins_pending_and_is_never_placed(rack):
    join(rogue_facts(rack))
    rogue = Node.objects.get(hostname="gb-r01-t99")
    assert rogue.state == NodeState.PENDING
    assert "accepts it into a rack and slot" in rogue.state_reason
    assert Event.objects.filter(verb="node.pending", node=rogue).exists()

    # Every known tray cordoned: a one-tray domain has only the rogue tray to go to.
    operator = factories.make_user("op", staff=True)
    for node in rack.nodes.all():
        node_cordon(actor=Actor.for_user(operator), node=node, reason="test")
    namespace = factories.make_namespace("team-a", max_gpus=72, max_nodes=18)
    domain = request_and_place(namespace, factories.make_user("alice"), num_nodes=1)
    assert domain.phase == Phase.ADMITTED  # queued: the pending tray is not placeable
    assert not domain.members.exists()


def test_an_operator_accepts_it_into_a_free_compute_slot_of_a_known_rack(rack):
    join(rogue_facts(rack))
    api = operator_api()
    url = "/api/v1/nodes/gb-r01-t99/accept/"
    refusals = [
        ({"rack": "nope", "slot": 18}, "rack"),
        ({"rack": rack.name, "slot": 19}, "slot"),  # an NVL72 rack has 18 compute slots
        ({"rack": rack.name, "slot": 1}, "slot"),  # another tray's
        ({"rack": rack.name, "slot": "18"}, "slot"),
        ({"rack": rack.name}, "slot"),
    ]
    for body, field in refusals:
        resp = api.post(url, body, format="json")
        assert resp.status_code == 400, (body, resp.content)
        assert resp.json()["field"] == field, (body, resp.json())
        assert Node.objects.get(hostname="gb-r01-t99").state == NodeState.PENDING

    tenant = APIClient()
    tenant.force_authenticate(factories.make_user("alice"))
    assert tenant.post(url, {"rack": rack.name, "slot": 18}, format="json").status_code == 403

    resp = api.post(url, {"rack": rack.name, "slot": 18, "reason": "racked"}, format="json")
    assert resp.status_code == 200, resp.content
    accepted = Node.objects.get(hostname="gb-r01-t99")
    assert (accepted.state, accepted.rack_id, accepted.slot) == (NodeState.READY, rack.pk, 18)
    assert Event.objects.filter(verb="node.accepted", node=accepted).exists()
    again = api.post(url, {"rack": rack.name, "slot": 18}, format="json")
    assert again.status_code == 409


def test_marking_a_pending_tray_down_and_up_leaves_it_waiting_for_acceptance(rack):
    join(rogue_facts(rack))
    actor = Actor.for_user(factories.make_user("op", staff=True))
    rogue = Node.objects.get(hostname="gb-r01-t99")
    node_mark_down(actor=actor, node=rogue, reason="test")
    node_mark_up(actor=actor, node=rogue, reason="test")
    assert Node.objects.get(pk=rogue.pk).state == NodeState.PENDING


def test_a_clique_move_reported_with_a_node_token_waits_for_an_operator(rack):
    node = rack.nodes.order_by("slot").first()
    body = rogue_facts(rack, hostname=node.hostname, ip=node.management_ip)
    body["gpus"] = [{"index": g.index, "uuid": g.uuid} for g in node.gpus.all()]
    client = join(body)
    assert Node.objects.get(pk=node.pk).state == NodeState.READY

    moved = {k: v for k, v in body.items() if k != "join_token"}
    moved["cluster_uuid"] = "9d1f4c7e-0000-4000-8000-00000000beef"
    resp = client.put(f"/api/v1/agent/nodes/{node.pk}/facts/", moved, format="json")
    assert resp.status_code == 200, resp.content
    assert "clique" in resp.json()["changed"]
    after = Node.objects.get(pk=node.pk)
    assert after.state == NodeState.PENDING and after.clique_id == node.clique_id
    assert "reported a new identity (clique" in after.state_reason
    assert Event.objects.filter(verb="node.identity_held", node=after).exists()


def test_the_tray_page_offers_acceptance_and_the_form_accepts_it(rack, client):
    join(rogue_facts(rack))
    client.force_login(factories.make_user("op", staff=True))
    page = client.get("/fabric/nodes/gb-r01-t99/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Waiting for acceptance" in html and f'<option value="{rack.name}">' in html

    refused = client.post("/fabric/nodes/gb-r01-t99/accept/", {"rack": rack.name, "slot": 1})
    assert refused.status_code == 302
    assert Node.objects.get(hostname="gb-r01-t99").state == NodeState.PENDING
    shown = client.get("/fabric/nodes/gb-r01-t99/").content.decode()
    assert f"slot 1 of rack {rack.name} holds" in shown

    client.post("/fabric/nodes/gb-r01-t99/accept/", {"rack": rack.name, "slot": 18})
    assert Node.objects.get(hostname="gb-r01-t99").state == NodeState.READY
    assert "Waiting for acceptance" not in client.get("/fabric/nodes/gb-r01-t99/").content.decode()
