"""A tray's identity (management IP, clique, GPU set, rack) is the operator's: what its
agent reports under its node token, in any state, is held until an operator accepts it,
the tray out of placement meanwhile; addresses no tray can have are refused naming `ip`;
placement refuses a tray in another rack's clique."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from domains.agents.models import JoinToken
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.models import Phase
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon, node_mark_down, node_mark_up
from domains.placement.model import TrayStatus
from domains.security import hash_token
from testbed import factories
from tests.support.lifecycle import request_and_place

pytestmark = pytest.mark.django_db
JOIN = "dpj_identity-test-join-token"


@pytest.fixture
def racks(db):
    """Two racks of four trays, each rack its own clique."""
    found = factories.make_racks("4", "4", ip_prefix=factories.tray_ip_prefix(14))
    JoinToken.objects.create(name="tests", token_hash=hash_token(JOIN))
    return found


@pytest.fixture
def operator():
    return factories.make_user("op", staff=True)


def facts(node: Node, **over: object) -> dict:
    body = {
        "hostname": node.hostname,
        "ip": node.management_ip,
        "gpus": [{"index": g.index, "uuid": g.uuid} for g in node.gpus.order_by("index")],
        "cluster_uuid": node.clique.cluster_uuid,
        "clique_id": node.clique.clique_id,
        "driver_version": "580.82.07",
        "channel_major": 237,
    }
    return body | over


def joined(node: Node, **over: object) -> APIClient:
    resp = APIClient().post(
        "/api/v1/agent/join/", {**facts(node, **over), "join_token": JOIN}, format="json"
    )
    assert resp.status_code == 201, resp.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['token']}")
    return client


def put(client: APIClient, node: Node, body: dict):
    return client.put(f"/api/v1/agent/nodes/{node.pk}/facts/", body, format="json")


def heartbeat(client: APIClient, node: Node) -> None:
    report = {"generation_applied": 0, "step": "idle", "clean": True}
    resp = client.post(f"/api/v1/agent/nodes/{node.pk}/status/", report, format="json")
    assert resp.status_code == 200, resp.content


def status_of(node: Node) -> str:
    return next(
        t.status for c in topology_snapshot().cliques for t in c.trays if t.node_id == node.pk
    )


def operator_api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_an_ip_change_through_the_node_token_takes_the_tray_out_of_placement(racks, operator):
    node = racks[0].nodes.order_by("slot").first()
    old_ip = node.management_ip
    client = joined(node)
    new_ip = f"{factories.tray_ip_prefix(14)}.99.1"
    resp = put(client, node, facts(node, ip=new_ip))
    assert resp.status_code == 200 and resp.json()["changed"] == ["ip"], resp.content
    node.refresh_from_db()
    assert (node.state, node.management_ip) == (NodeState.PENDING, old_ip)
    assert status_of(node) != TrayStatus.FREE
    assert node.identity_hold["changes"] == {"ip": {"from": old_ip, "to": new_ip}}
    assert Event.objects.filter(node=node, verb="node.identity_held").count() == 1
    heartbeat(client, node)  # the agent goes on reporting: still out
    assert Node.objects.get(pk=node.pk).state == NodeState.PENDING

    # The operator sees the old and the new address, in the API and on the tray page.
    api = operator_api(operator)
    shown = api.get(f"/api/v1/nodes/{node.hostname}/").json()["identityChange"]
    assert shown["changes"]["ip"] == {"from": old_ip, "to": new_ip}
    tenant = operator_api(factories.make_user("alice"))
    assert tenant.get(f"/api/v1/nodes/{node.hostname}/").json()["identityChange"] is None
    page = APIClient()
    page.force_login(operator)
    html = page.get(f"/fabric/nodes/{node.hostname}/").content.decode()
    assert old_ip in html and new_ip in html and "Accept the new identity" in html

    resp = api.post(f"/api/v1/nodes/{node.hostname}/accept/", {}, format="json")
    assert resp.status_code == 200, resp.content
    node.refresh_from_db()
    assert (node.state, node.management_ip, node.identity_hold) == (NodeState.READY, new_ip, {})
    assert status_of(node) == TrayStatus.FREE


def test_a_made_up_gpu_set_is_held_and_never_counted(racks):
    node = racks[0].nodes.order_by("slot").first()
    client = joined(node)
    made_up = [{"index": i, "uuid": f"GPU-made-up-{i}"} for i in range(64)]
    resp = put(client, node, facts(node, gpus=made_up))
    assert resp.status_code == 200, resp.content
    node.refresh_from_db()
    assert (node.state, node.gpu_count, node.gpus.count()) == (NodeState.PENDING, 4, 4)
    shown = node.identity_hold["changes"]["gpus"]["to"]
    assert len(shown) == 9 and shown[-1] == "… 56 more"  # the page is not flooded


@pytest.mark.parametrize(
    "ip",
    [
        "169.254.169.254",
        "127.0.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "::ffff:169.254.1.1",
    ],
)
def test_an_address_no_tray_can_have_is_refused_naming_ip(racks, ip):
    node = racks[0].nodes.order_by("slot").first()
    client = joined(node)
    resp = put(client, node, facts(node, ip=ip))
    assert resp.status_code == 400 and resp.json()["field"] == "ip", resp.content
    assert Node.objects.get(pk=node.pk).management_ip == node.management_ip
    fresh = {"join_token": JOIN, "hostname": "gb-new-t1", "ip": ip}
    resp = APIClient().post("/api/v1/agent/join/", fresh, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "ip", resp.content
    assert not Node.objects.filter(hostname="gb-new-t1").exists()


def test_a_cordoned_tray_goes_back_to_its_cordon_once_its_change_is_accepted(racks, operator):
    node = racks[0].nodes.order_by("slot").first()
    client = joined(node)
    node_cordon(actor=Actor.for_user(operator), node=node, reason="bad cable")
    other = racks[1].nodes.first().clique
    put(client, node, facts(node, cluster_uuid=other.cluster_uuid, clique_id=other.clique_id))
    node.refresh_from_db()
    assert node.state == NodeState.PENDING and node.clique_id != other.pk
    # Its clique is rack 2's: accepting it into rack 1 is refused, naming the rack.
    api = operator_api(operator)
    refused = api.post(f"/api/v1/nodes/{node.hostname}/accept/", {}, format="json")
    assert refused.status_code == 400 and refused.json()["field"] == "rack", refused.content
    assert Node.objects.get(pk=node.pk).state == NodeState.PENDING
    # Back to the clique it had: the hold shows nothing new, the operator lets it back in.
    put(client, node, facts(node))
    resp = api.post(f"/api/v1/nodes/{node.hostname}/accept/", {"reason": "ok"}, format="json")
    assert resp.status_code == 200, resp.content
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.CORDONED, "bad cable")


def test_a_down_trays_clique_move_stays_out_after_mark_up(racks, operator, ns_a, tenant_a):
    node = racks[0].nodes.order_by("slot").first()
    joined(node)
    actor = Actor.for_user(operator)
    node_mark_down(actor=actor, node=node, reason="repair")
    other = racks[1].nodes.first().clique
    # While down, its agent joins again (as a repaired tray's does), in rack 2's clique.
    client = joined(node, cluster_uuid=other.cluster_uuid, clique_id=other.clique_id)
    node.refresh_from_db()
    assert node.state == NodeState.DOWN and node.clique_id != other.pk
    assert node.identity_hold["changes"]["clique"]["to"] == other.label

    node_mark_up(actor=actor, node=node, reason="repaired")
    heartbeat(client, node)
    node.refresh_from_db()
    assert node.state == NodeState.PENDING  # compared at mark-up: waits for acceptance
    for tray in racks[0].nodes.exclude(pk=node.pk):
        node_cordon(actor=actor, node=tray, reason="test")
    domain = request_and_place(ns_a, tenant_a, num_nodes=1)
    assert not domain.members.filter(node=node).exists()


def test_placement_refuses_a_tray_in_another_racks_clique(racks, ns_a, tenant_a, operator):
    node = racks[0].nodes.order_by("slot").first()
    theirs = racks[1].nodes.first().clique
    Node.objects.filter(pk=node.pk).update(clique=theirs)  # however it got there
    assert status_of(node) == TrayStatus.FOREIGN
    for tray in Node.objects.exclude(pk=node.pk):  # only the misplaced tray is ready
        node_cordon(actor=Actor.for_user(operator), node=tray, reason="test")
    domain = request_and_place(ns_a, tenant_a, num_nodes=1)
    assert domain.phase == Phase.ADMITTED and not domain.members.exists()
