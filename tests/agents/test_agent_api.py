"""The agent API: join, desired state, status reports, and a node token's limits."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings
from rest_framework.test import APIClient

from agentwire.messages import StatusReport, Step, status_report
from domains.agents.heartbeats import agent_heartbeat
from domains.agents.joining import agent_join
from domains.agents.models import JoinToken
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import AllocationMode, DomainMember, MemberState, Phase
from domains.computedomains.services import domain_release
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_mark_down
from domains.security import hash_token
from testbed import factories
from testbed.agents import node_facts
from tests.support.lifecycle import request_and_place

pytestmark = pytest.mark.django_db
IP_PREFIX = factories.tray_ip_prefix(12)
JOIN = "dpj_unit-test-join-token"
CLUSTER = "5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11"


@pytest.fixture
def rack(db):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    JoinToken.objects.create(name="tests", token_hash=hash_token(JOIN))
    return rack


def facts(node: Node, **over: object) -> dict:
    body = {
        "join_token": JOIN,
        "hostname": node.hostname,
        "ip": node.management_ip,
        "cluster_uuid": node.clique.cluster_uuid,
        "clique_id": node.clique.clique_id,
        "driver_version": "580.82.07",
        "channel_major": 237,
        "gpus": [{"index": g.index, "uuid": g.uuid, "product": g.product} for g in node.gpus.all()],
        "agent_version": "0.1.0",
    }
    body.update(over)
    return body


def join(node: Node) -> tuple[APIClient, int]:
    resp = APIClient().post("/api/v1/agent/join/", facts(node), format="json")
    assert resp.status_code == 201, resp.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['token']}")
    return client, resp.json()["node_id"]


def report(**over: object) -> dict:
    body = {"domain_uid": None, "generation_applied": 0, "step": Step.IDLE, "clean": True}
    body.update(over)
    return body


def test_an_agent_joins_with_a_join_token_and_gets_a_hashed_node_token(rack):
    node = rack.nodes.first()
    resp = APIClient().post("/api/v1/agent/join/", facts(node), format="json")
    assert resp.status_code == 201
    token = resp.json()["token"]
    node.refresh_from_db()
    assert token.startswith("dpn_") and node.agent_token_hash == hash_token(token)
    assert token not in str(Node.objects.filter(pk=node.pk).values().first())
    assert node.channel_major == 237 and node.state == NodeState.READY
    assert Event.objects.filter(verb="agent.rejoined", node=node).exists()
    assert JoinToken.objects.get().uses == 1


def test_a_bad_join_token_is_refused_naming_the_field(rack):
    resp = APIClient().post(
        "/api/v1/agent/join/", facts(rack.nodes.first(), join_token="dpj_wrong"), format="json"
    )
    assert resp.status_code == 403
    assert resp.json()["field"] == "join_token"


def test_the_configured_join_token_works_and_registers_new_trays(rack):
    with override_settings(PORTAL={**settings.PORTAL, "AGENT_JOIN_TOKEN": "dpj_conf"}):
        _join_lab_tray()


def _join_lab_tray() -> None:
    body = {"join_token": "dpj_conf", "hostname": "lab-tray-1", "ip": "127.12.9.1"}
    resp = APIClient().post("/api/v1/agent/join/", body, format="json")
    assert resp.status_code == 201
    node = Node.objects.get(hostname="lab-tray-1")
    assert node.clique is None  # no NVML clique reported: never placed in a domain


def test_join_input_errors_name_the_field(rack):
    resp = APIClient().post(
        "/api/v1/agent/join/", facts(rack.nodes.first(), channel_major="x"), format="json"
    )
    assert resp.status_code == 400
    assert resp.json()["field"] == "channel_major"


def test_joining_again_after_the_agent_fell_silent_replaces_the_old_token(rack):
    node = rack.nodes.first()
    old, node_id = join(node)
    factories.stale_heartbeat(node)  # the agent lost its token and stopped reporting
    new, _ = join(node)
    assert old.get(f"/api/v1/agent/nodes/{node_id}/desired/").status_code == 401
    assert new.get(f"/api/v1/agent/nodes/{node_id}/desired/").status_code == 200


def test_an_idle_tray_is_told_to_hold_nothing(rack):
    client, node_id = join(rack.nodes.first())
    doc = client.get(f"/api/v1/agent/nodes/{node_id}/desired/").json()
    assert doc["domain"] is None and doc["release"] is None
    assert doc["node"]["id"] == node_id


def test_every_member_gets_the_same_ordered_peer_list_and_its_own_index(rack, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, name="d4single", num_nodes=4)
    docs = []
    for node in rack.nodes.all():
        client, node_id = join(node)
        docs.append(client.get(f"/api/v1/agent/nodes/{node_id}/desired/").json()["domain"])
    assert {d["uid"] for d in docs} == {str(domain.uid)}
    assert all(d["peers"] == docs[0]["peers"] for d in docs)
    assert sorted(d["index"] for d in docs) == [0, 1, 2, 3]
    member_ips = list(
        DomainMember.objects.filter(domain=domain)
        .order_by("index")
        .values_list("ip_address", flat=True)
    )
    assert [p["ip"] for p in docs[0]["peers"]] == member_ips
    assert docs[0]["channels"] == {"mode": "Single", "numbers": [1]}
    assert docs[0]["imex"] == {"server_port": 50000, "cmd_port": 50005}
    assert docs[0]["generation"] == domain.generation
    assert docs[0]["request_id"] == domain.request_id


def test_all_mode_sends_the_channel_range_not_every_number(rack, ns_a, tenant_a):
    request_and_place(ns_a, tenant_a, name="d4all", num_nodes=4, allocation_mode=AllocationMode.ALL)
    client, node_id = join(rack.nodes.first())
    doc = client.get(f"/api/v1/agent/nodes/{node_id}/desired/").json()
    assert doc["domain"]["channels"] == {"mode": "All", "first": 0, "last": 2047}


def test_reports_are_the_heartbeat_and_move_the_member(rack, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, name="d4single", num_nodes=4)
    node = rack.nodes.first()
    client, node_id = join(node)
    body = report(
        domain_uid=str(domain.uid),
        generation_applied=domain.generation,
        step=Step.WAITING_PEERS,
        daemon_state="WAITING_FOR_PEERS",
        domain_state="DOWN",
        peers=[{"index": 1, "ip": "127.12.1.2", "status": "NODE_MAP_MISMATCH"}],
        clean=False,
        error="node map mismatch with node #1 (127.12.1.2)",
    )
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/status/", body, format="json")
    assert resp.status_code == 200, resp.content
    node.refresh_from_db()
    assert node.daemon_state == "WAITING_FOR_PEERS" and node.last_heartbeat is not None
    assert node.agent_report["peers"][0]["status"] == "NODE_MAP_MISMATCH"
    member = DomainMember.objects.get(domain=domain, node=node)
    assert member.state == MemberState.WAITING_PEERS
    assert "node map mismatch" in member.message


def test_a_bad_report_is_refused_naming_the_field(rack):
    client, node_id = join(rack.nodes.first())
    resp = client.post(
        f"/api/v1/agent/nodes/{node_id}/status/", report(step="dancing"), format="json"
    )
    assert resp.status_code == 400 and resp.json()["field"] == "step"


def test_a_released_domain_tells_its_trays_to_tear_down(rack, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, name="d4single", num_nodes=4)
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    client, node_id = join(rack.nodes.first())
    doc = client.get(f"/api/v1/agent/nodes/{node_id}/desired/").json()
    assert doc["domain"] is None
    assert doc["release"]["uid"] == str(domain.uid)
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASING


# --- a node token acts only for its own node --------------------------------------------------


def test_a_node_token_cannot_read_another_nodes_desired_state(rack):
    mine, other = list(rack.nodes.all())[:2]
    client, _ = join(mine)
    resp = client.get(f"/api/v1/agent/nodes/{other.pk}/desired/")
    assert resp.status_code == 403
    event = Event.objects.get(verb="agent.access_denied")
    assert event.node == mine and event.details["target_node_id"] == str(other.pk)


def test_a_burst_of_refusals_is_one_audit_line_that_counts_them(rack):
    mine, *others = list(rack.nodes.all())
    client, _ = join(mine)
    for i in range(60):
        target = others[i % len(others)]
        assert client.get(f"/api/v1/agent/nodes/{target.pk}/desired/").status_code == 403
    (event,) = Event.objects.filter(verb="agent.access_denied")
    assert event.details["count"] == 60 and event.details["last_at"]


def test_a_node_token_cannot_report_for_another_node(rack, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, name="d4single", num_nodes=4)
    mine, other = list(rack.nodes.all())[:2]
    client, _ = join(mine)
    body = report(domain_uid=str(domain.uid), step=Step.READY, clean=False)
    resp = client.post(f"/api/v1/agent/nodes/{other.pk}/status/", body, format="json")
    assert resp.status_code == 403
    other.refresh_from_db()
    assert other.agent_report == {}
    assert DomainMember.objects.get(node=other).state == MemberState.ASSIGNED
    assert Event.objects.filter(verb="agent.access_denied", node=mine).count() == 1


def test_the_agent_api_needs_a_node_token(rack, tenant_a):
    node = rack.nodes.first()
    assert APIClient().get(f"/api/v1/agent/nodes/{node.pk}/desired/").status_code == 401
    bogus = APIClient()
    bogus.credentials(HTTP_AUTHORIZATION="Node dpn_not-a-token")
    assert bogus.get(f"/api/v1/agent/nodes/{node.pk}/desired/").status_code == 401
    user = APIClient()
    user.force_login(tenant_a)  # a signed-in person is not a tray
    assert user.get(f"/api/v1/agent/nodes/{node.pk}/desired/").status_code in (401, 403)


def test_a_node_token_opens_nothing_in_the_user_api(rack):
    client, _ = join(rack.nodes.first())
    assert client.get("/api/v1/nodes/").status_code in (401, 403)


def test_the_join_token_cannot_take_over_a_tray_that_serves_a_live_domain(
    rack, ns_a, tenant_a, operator
):
    nodes = list(rack.nodes.order_by("slot"))
    for node in nodes:
        join(node)
    domain = request_and_place(ns_a, tenant_a, name="d4single", num_nodes=4)
    victim = nodes[0]
    before = Node.objects.get(pk=victim.pk).agent_token_hash

    resp = APIClient().post("/api/v1/agent/join/", facts(victim, ip=""), format="json")

    assert resp.status_code == 409, resp.content
    assert resp.json()["field"] == "hostname"
    assert domain.name not in resp.json()["message"]  # the caller may be anyone
    assert Node.objects.get(pk=victim.pk).agent_token_hash == before  # old token still works

    # Once an operator has declared the tray down, a fresh agent may register it again.
    node_mark_down(actor=Actor.for_user(operator), node=victim, reason="reimaged")
    assert APIClient().post("/api/v1/agent/join/", facts(victim), format="json").status_code == 201


def test_a_tray_marked_gone_cannot_join(rack):
    node = rack.nodes.first()
    Node.objects.filter(pk=node.pk).update(gone=True)
    resp = APIClient().post("/api/v1/agent/join/", facts(node), format="json")
    assert resp.status_code == 409 and "gone" in resp.json()["message"]


# --- a report of a tray in service in one statement (the fast path's) -------------------------


def idle_report(**over: object) -> StatusReport:
    return status_report(**{"domain_uid": None, "generation_applied": 0, "step": Step.IDLE} | over)


def test_a_steady_heartbeat_is_one_statement(rack, django_assert_num_queries):
    node = rack.nodes.first()
    _, raw = agent_join(join_token=JOIN, facts=node_facts(node))
    with django_assert_num_queries(1):
        assert agent_heartbeat(node_id=node.pk, token=raw, report=idle_report(clean=True))
    node.refresh_from_db()
    assert node.agent_report["clean"] is True and node.last_heartbeat is not None


def test_a_steady_heartbeat_of_a_member_also_folds_the_report(rack, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, name="d4single", num_nodes=4)
    member = DomainMember.objects.filter(domain=domain).select_related("node").first()
    _, raw = agent_join(join_token=JOIN, facts=node_facts(member.node))
    report_ = idle_report(
        domain_uid=str(domain.uid), generation_applied=domain.generation, step=Step.CONFIGURING
    )
    assert agent_heartbeat(node_id=member.node_id, token=raw, report=report_)
    member.refresh_from_db()
    assert member.state == MemberState.CONFIGURING and member.step == Step.CONFIGURING


def test_a_report_that_changes_the_daemon_state_is_one_statement_too(
    rack, django_assert_num_queries, django_capture_on_commit_callbacks
):
    node = rack.nodes.first()
    _, raw = agent_join(join_token=JOIN, facts=node_facts(node))
    with django_capture_on_commit_callbacks() as callbacks, django_assert_num_queries(1):
        assert agent_heartbeat(node_id=node.pk, token=raw, report=idle_report(daemon_state="READY"))
    assert Node.objects.get(pk=node.pk).daemon_state == "READY"
    assert len(callbacks) == 1  # the fabric view hears of the daemon's new state


@pytest.mark.parametrize("case", ["other node", "old token", "unknown", "gone"])
def test_a_heartbeat_that_is_not_steady_writes_nothing(rack, case):
    node, other = list(rack.nodes.all())[:2]
    _, raw = agent_join(join_token=JOIN, facts=node_facts(node))
    target, report_ = node.pk, idle_report()
    if case == "other node":
        target = other.pk
    elif case == "old token":
        factories.stale_heartbeat(node)  # an agent that lost its token joins again
        agent_join(join_token=JOIN, facts=node_facts(node))
    elif case == "unknown":
        Node.objects.filter(pk=node.pk).update(state=NodeState.UNKNOWN)
    else:
        Node.objects.filter(pk=node.pk).update(gone=True)
    assert agent_heartbeat(node_id=target, token=raw, report=report_) is False
    assert not Node.objects.filter(pk__in=[node.pk, other.pk]).exclude(agent_report={}).exists()


# --- the agent's link errors ---------------------------------------------------------------


def test_a_report_carries_the_agents_link_error_and_an_older_agents_report_has_none(rack):
    client, node_id = join(rack.nodes.first())
    url = f"/api/v1/agent/nodes/{node_id}/status/"
    failing = idle_report(clean=True, link_error="desired state: HTTP 500 Internal Server Error")
    assert client.post(url, failing, format="json").status_code == 200
    node = Node.objects.get(pk=node_id)
    assert node.agent_report["link_error"] == "desired state: HTTP 500 Internal Server Error"

    older = {k: v for k, v in idle_report(clean=True).items() if k != "link_error"}
    assert client.post(url, older, format="json").status_code == 200  # an agent before it
    node.refresh_from_db()
    assert node.agent_report["link_error"] == ""


def test_a_link_error_over_2000_characters_is_refused_naming_the_field(rack):
    client, node_id = join(rack.nodes.first())
    long = idle_report(clean=True, link_error="x" * 2001)
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/status/", long, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "link_error"
