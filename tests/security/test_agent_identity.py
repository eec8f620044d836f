"""What a leaked join token can no longer do, against the real server: take over a
tray whose agent is alive, change a known tray's identity (clique, GPUs, IP), or learn whose
domain a busy tray serves. An operator's allow-rejoin opens one join."""

from __future__ import annotations

import pytest

from domains.agents.models import JoinToken
from domains.audit.events import SYSTEM
from domains.computedomains.models import Phase
from domains.inventory.models import Node
from domains.inventory.services import node_cordon
from domains.security import hash_token
from testbed import factories
from tests.api.conftest import make_domain
from tests.security.conftest import IP_PREFIX, JOIN, bearer
from tests.support.lifecycle import request_and_place

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def facts(node: Node, **over: object) -> dict:
    body = {
        "join_token": JOIN,
        "hostname": node.hostname,
        "ip": node.management_ip,
        "cluster_uuid": node.clique.cluster_uuid,
        "clique_id": node.clique.clique_id,
        "gpus": [{"index": g.index, "uuid": g.uuid} for g in node.gpus.order_by("index")],
    }
    return body | over


@pytest.fixture
def tray(fabric) -> Node:
    JoinToken.objects.get_or_create(token_hash=hash_token(JOIN), defaults={"name": "security"})
    return fabric.nodes.order_by("slot").first()


def join(http, body: dict):
    return http.post("/api/v1/agent/join/", json=body)


def agent_of(http, node: Node) -> dict[str, str]:
    """The tray's real agent joins first and keeps its node token."""
    resp = join(http, facts(node))
    assert resp.status_code == 201, resp.text
    return {"Authorization": f"Node {resp.json()['token']}"}


def desired(http, node: Node, auth: dict[str, str]) -> int:
    return http.get(f"/api/v1/agent/nodes/{node.pk}/desired/", headers=auth).status_code


def test_a_tray_with_a_live_agent_cannot_be_taken_over(http, tray):
    real = agent_of(http, tray)
    takeover = join(http, facts(tray))  # the very same facts: only the join token differs
    assert takeover.status_code == 409, takeover.text
    assert takeover.json()["field"] == "hostname"
    assert "live agent" in takeover.json()["message"]
    assert desired(http, tray, real) == 200  # the real agent is not locked out


def test_a_join_cannot_move_an_idle_tray_out_of_its_clique(http, tray):
    agent_of(http, tray)
    factories.stale_heartbeat(tray)  # its agent went quiet: the tray looks idle
    clique = tray.clique_id
    resp = join(http, {"join_token": JOIN, "hostname": tray.hostname})
    assert resp.status_code == 409, resp.text
    assert resp.json()["field"] == "clique"
    other = facts(tray, gpus=[{"index": 0, "uuid": "GPU-attacker"}], ip="127.250.0.1")
    resp = join(http, other)
    assert resp.status_code == 409 and resp.json()["field"] == "ip", resp.text
    tray.refresh_from_db()
    assert tray.clique_id == clique and tray.management_ip != "127.250.0.1"
    # The tray's own agent, same facts, comes back after losing its token.
    assert join(http, facts(tray)).status_code == 201


def test_a_busy_trays_refusal_names_no_domain(http, tray, ns_b, tenant_b):
    agent_of(http, tray)
    make_domain(ns_b, "secret-b", nodes=[tray], requested_by=tenant_b)
    factories.stale_heartbeat(tray)
    resp = join(http, facts(tray))
    assert resp.status_code == 409, resp.text
    assert "secret-b" not in resp.text and ns_b.name not in resp.text


def test_an_operator_allows_one_rejoin_with_new_identity_facts(http, tray, operator, tenant_a):
    old = agent_of(http, tray)
    replaced = [{"index": i, "uuid": f"GPU-rma-{i}"} for i in range(4)]
    assert join(http, facts(tray, gpus=replaced)).status_code == 409
    url = f"/api/v1/nodes/{tray.hostname}/allow-rejoin/"
    assert http.post(url, json={}, headers=bearer(tenant_a)).status_code in (403, 404)
    allowed = http.post(url, json={"reason": "GPUs replaced"}, headers=bearer(operator))
    assert allowed.status_code == 200, allowed.text
    resp = join(http, facts(tray, gpus=replaced))
    assert resp.status_code == 201, resp.text
    assert sorted(tray.gpus.values_list("uuid", flat=True)) == [g["uuid"] for g in replaced]
    assert desired(http, tray, old) == 401  # the old token stops working
    # The allowance served that one join.
    assert join(http, facts(tray, gpus=replaced)).status_code == 409


def test_a_tray_cannot_move_itself_into_another_racks_clique_or_address(
    http, tray, operator, ns_b, tenant_b
):
    """The attack end to end: a rack-1 tray's own agent reports rack 2's clique and the
    metadata service's address. The address is refused; the clique move waits for an
    operator, and the tray is placed into nobody's domain meanwhile."""
    (rack2,) = factories.make_racks("2", ip_prefix=IP_PREFIX, first_rack=2)
    theirs = rack2.nodes.first().clique
    auth = agent_of(http, tray)
    url = f"/api/v1/agent/nodes/{tray.pk}/facts/"
    body = {k: v for k, v in facts(tray).items() if k != "join_token"}
    metadata = http.put(url, json=body | {"ip": "169.254.169.254"}, headers=auth)
    assert metadata.status_code == 400 and metadata.json()["field"] == "ip", metadata.text
    moved = body | {"cluster_uuid": theirs.cluster_uuid, "clique_id": theirs.clique_id}
    assert http.put(url, json=moved, headers=auth).status_code == 200

    shown = http.get(f"/api/v1/nodes/{tray.hostname}/", headers=bearer(operator)).json()
    assert shown["state"] == "pending" and shown["managementIp"] == tray.management_ip
    assert shown["identityChange"]["changes"]["clique"]["to"] == theirs.label
    for node in Node.objects.exclude(pk=tray.pk):
        node_cordon(actor=SYSTEM, node=node, reason="only the moved tray is left")
    domain = request_and_place(ns_b, tenant_b, num_nodes=1)
    assert domain.phase == Phase.ADMITTED and not domain.members.exists()
