"""The agents' heartbeat and desired state over the real server (portal/api/agent/fastpath.py).

Those two requests skip Django's handler when they are well-formed; everything that is not
(no or bad token, another node's URL, a body that does not validate) must still get
Django's answer, error shape and audit event. Each test here asks over HTTP and checks the
answer and the rows against what the Django views do (tests/agents/test_agent_api.py).
"""

from __future__ import annotations

import json

import httpx
import pytest
from rest_framework.test import APIClient

from agentwire.messages import Step
from domains.agents.joining import agent_join
from domains.audit.models import Event
from domains.computedomains.models import DomainMember, MemberState
from domains.inventory.models import Node, NodeState
from testbed import factories
from testbed.agents import ensure_join_token, node_facts
from testbed.processes import wait_until
from tests.e2e.conftest import IP_PREFIX
from tests.support.lifecycle import request_and_place

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IDLE = {"domain_uid": None, "generation_applied": 0, "step": Step.IDLE, "clean": True}


@pytest.fixture
def trays(portal) -> list[tuple[Node, httpx.Client]]:
    """Four joined trays, each with an HTTP client that carries its node token."""
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    join_token = ensure_join_token()
    out = []
    for node in Node.objects.filter(rack=rack).select_related("clique").order_by("slot"):
        _, raw = agent_join(join_token=join_token, facts=node_facts(node))
        client = httpx.Client(
            base_url=f"{portal}/api/v1/agent/nodes",
            headers={"Authorization": f"Node {raw}"},
            timeout=10,
        )
        out.append((node, client))
    yield out
    for _, client in out:
        client.close()


def test_a_steady_heartbeat_is_recorded_and_echoes_the_request_id(trays):
    node, client = trays[0]
    resp = client.post(f"/{node.pk}/status/", json=IDLE, headers={"X-Request-ID": "hb-1"})
    assert resp.status_code == 200 and resp.json() == {"ok": True}
    assert resp.headers["X-Request-ID"] == "hb-1"
    assert resp.headers["Content-Type"] == "application/json"
    node.refresh_from_db()
    assert node.agent_report["step"] == Step.IDLE and node.agent_report["clean"] is True
    before = node.last_heartbeat
    assert client.post(f"/{node.pk}/status", json=IDLE).status_code == 200  # no slash too
    node.refresh_from_db()
    assert node.last_heartbeat > before


def test_a_report_that_changes_the_tray_takes_the_full_path(trays):
    node, client = trays[0]
    Node.objects.filter(pk=node.pk).update(state=NodeState.UNKNOWN)
    body = {**IDLE, "daemon_state": "READY", "clean": False}
    assert client.post(f"/{node.pk}/status/", json=body).status_code == 200
    node.refresh_from_db()
    assert node.daemon_state == "READY" and node.state == NodeState.READY
    assert Event.objects.filter(verb="node.heartbeat_resumed", node=node).count() == 1


def test_reports_move_the_member_of_a_domain(trays):
    ns = factories.make_namespace("fast", max_gpus=16, max_nodes=4, max_domains=1)
    user = factories.make_user("fast-tenant")
    factories.add_member(user, ns, "member")
    domain = request_and_place(ns, user, "fp", num_nodes=4)
    node, client = trays[0]
    desired = client.get(f"/{node.pk}/desired/")
    assert desired.status_code == 200
    assert desired.json()["domain"]["uid"] == str(domain.uid)
    body = {
        "domain_uid": str(domain.uid),
        "generation_applied": domain.generation,
        "step": Step.WAITING_PEERS,
        "daemon_state": "WAITING_FOR_PEERS",
        "peers": [{"index": 1, "ip": f"{IP_PREFIX}.1.2", "status": "NEVER_CONNECTED"}],
    }
    assert client.post(f"/{node.pk}/status/", json=body).status_code == 200
    # Folded into the member on the worker, once per burst of the domain's reports.
    member = wait_until(
        lambda: DomainMember.objects.filter(
            domain=domain, node=node, state=MemberState.WAITING_PEERS
        ).first(),
        timeout=30,
        what="the report folded into the member",
    )
    assert member.connections == {"1": "NEVER_CONNECTED"}
    # The same report again is the steady state: recorded, and the member is unchanged.
    assert client.post(f"/{node.pk}/status/", json=body).status_code == 200
    assert DomainMember.objects.get(pk=member.pk).state_changed_at == member.state_changed_at


def test_desired_state_is_the_same_document_django_serves(trays):
    node, client = trays[1]
    fast = client.get(f"/{node.pk}/desired/")
    django = APIClient()
    django.credentials(HTTP_AUTHORIZATION=client.headers["Authorization"])
    slow = django.get(f"/api/v1/agent/nodes/{node.pk}/desired/")
    assert fast.status_code == slow.status_code == 200
    assert fast.json() == slow.json()
    assert fast.json()["node"] == {"id": node.pk, "hostname": node.hostname}


def test_another_nodes_url_is_refused_and_logged(trays):
    (mine, client), (other, _) = trays[0], trays[1]
    for resp in (
        client.get(f"/{other.pk}/desired/"),
        client.post(f"/{other.pk}/status/", json=IDLE),
    ):
        assert resp.status_code == 403 and resp.json()["code"] == "forbidden"
    other.refresh_from_db()
    assert other.agent_report == {}
    # One audit line for the burst, counting both refusals.
    (refused,) = Event.objects.filter(verb="agent.access_denied", node=mine)
    assert refused.details["count"] == 2


def test_a_missing_or_unknown_token_is_refused(trays):
    node, client = trays[0]
    base = str(client.base_url).rstrip("/")
    anonymous = httpx.post(f"{base}/{node.pk}/status/", json=IDLE)
    assert anonymous.status_code == 401
    bogus = httpx.post(
        f"{base}/{node.pk}/status/", json=IDLE, headers={"Authorization": "Node dpn_nope"}
    )
    assert bogus.status_code == 401 and bogus.json()["code"] == "authentication_failed"
    assert bogus.headers["WWW-Authenticate"] == "Node"
    node.refresh_from_db()
    assert node.agent_report == {}


def test_bad_bodies_get_djangos_errors_naming_the_field(trays):
    node, client = trays[0]
    resp = client.post(f"/{node.pk}/status/", json={**IDLE, "step": "dancing"})
    assert resp.status_code == 400 and resp.json()["field"] == "step"
    resp = client.post(
        f"/{node.pk}/status/", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400 and resp.json()["code"] == "malformed"
    resp = client.post(
        f"/{node.pk}/status/", content=json.dumps(IDLE), headers={"Content-Type": "text/plain"}
    )
    assert resp.status_code == 415
    # Over the size limit (the fast path's and the parser's): Django refuses it as too large.
    big = {**IDLE, "message": "x" * (1 << 21)}
    resp = client.post(f"/{node.pk}/status/", json=big)
    assert resp.status_code == 413 and resp.json()["code"] == "too_large"
    node.refresh_from_db()
    assert node.agent_report == {}
