"""The agent ↔ portal contract (agentwire/messages.py): what the portal serves and what the
agent sends both follow the same JSON Schemas, and the agent refuses what does not."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator, FormatChecker
from rest_framework.test import APIClient

from agentwire.messages import (
    DESIRED_STATE_SCHEMA,
    JOIN_REQUEST_SCHEMA,
    NODE_FACTS_SCHEMA,
    STATUS_REPORT_SCHEMA,
    Step,
)
from domains.agents.desired import desired_state_for
from domains.agents.models import JoinToken
from domains.audit.events import Actor
from domains.computedomains.models import AllocationMode, Phase
from domains.computedomains.phases import domain_fail
from domains.computedomains.placing import domain_place
from domains.computedomains.services import domain_release, domain_request
from domains.computedomains.specs import DomainSpec
from domains.inventory.models import Node
from domains.security import hash_token
from nodeagent.agent import Agent
from nodeagent.client import MalformedDocument, check_desired
from nodeagent.config import AgentConfig
from testbed import factories
from testbed.emulator.tray import GpuFacts, TrayFacts, prepare_tray
from tests.support.lifecycle import all_ready

pytestmark = pytest.mark.django_db
JOIN = "dpj_contract-test-join-token"

CHECK = {
    name: Draft202012Validator(schema, format_checker=FormatChecker())
    for name, schema in {
        "desired": DESIRED_STATE_SCHEMA,
        "report": STATUS_REPORT_SCHEMA,
        "facts": NODE_FACTS_SCHEMA,
        "join": JOIN_REQUEST_SCHEMA,
    }.items()
}


@pytest.fixture
def rack(db):
    (rack,) = factories.make_racks("4", ip_prefix=factories.tray_ip_prefix(13))
    JoinToken.objects.create(name="tests", token_hash=hash_token(JOIN))
    return rack


def join(node: Node) -> tuple[APIClient, int]:
    body = {
        "join_token": JOIN,
        "hostname": node.hostname,
        "ip": node.management_ip,
        "cluster_uuid": node.clique.cluster_uuid,
        "clique_id": node.clique.clique_id,
        "channel_major": 237,
    }
    resp = APIClient().post("/api/v1/agent/join/", body, format="json")
    assert resp.status_code == 201, resp.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['token']}")
    return client, resp.json()["node_id"]


def served(client: APIClient, node_id: int) -> dict:
    """What the agent API serves the tray, over HTTP."""
    resp = client.get(f"/api/v1/agent/nodes/{node_id}/desired/")
    assert resp.status_code == 200
    return resp.json()


@pytest.mark.parametrize("mode", [AllocationMode.SINGLE, AllocationMode.ALL])
def test_the_desired_state_follows_the_contract_in_every_phase(rack, ns_a, tenant_a, mode):
    nodes = list(rack.nodes.order_by("slot"))
    actor = Actor.for_user(tenant_a)
    client, node_id = join(nodes[0])
    seen: dict[str, dict] = {"none": served(client, node_id)}
    domain = domain_request(
        actor=actor, namespace=ns_a, spec=DomainSpec(name="c", num_nodes=2, allocation_mode=mode)
    )
    seen[domain.phase] = desired_state_for(nodes[0])  # Admitted: nothing for the tray yet
    domain = domain_place(domain_id=domain.pk)
    seen[Phase.FORMING] = served(client, node_id)
    domain = all_ready(domain)
    assert domain.phase == Phase.READY
    seen[Phase.READY] = desired_state_for(nodes[0])
    domain_release(actor=actor, domain=domain)
    seen[Phase.RELEASING] = desired_state_for(nodes[0])
    spec = DomainSpec(name="f", num_nodes=2)
    failing = domain_place(domain_id=domain_request(actor=actor, namespace=ns_a, spec=spec).pk)
    assert failing is not None and failing.phase == Phase.FORMING
    tray = failing.members.first().node
    domain_fail(domain_id=failing.pk, reason="Test", message="failed on purpose")
    seen[Phase.FAILED] = desired_state_for(tray)
    for phase, doc in seen.items():
        errors = [e.message for e in CHECK["desired"].iter_errors(doc)]
        assert not errors, (phase, errors)
        check_desired(doc)  # ... and the agent takes it
    assert seen[Phase.FORMING]["domain"]["channels"]["mode"] == mode
    assert seen[Phase.RELEASING]["release"] and seen[Phase.RELEASING]["domain"] is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["domain"].pop("peers"), "domain"),
        (lambda d: d["domain"]["peers"][0].update(index="zero"), "domain"),
        (lambda d: d["domain"].update(channels={"mode": "Some"}), "domain"),
        (lambda d: d.update(extra=1), "(the document)"),
        (lambda d: d["node"].update(id=0), "node/id"),
    ],
)
def test_the_agent_refuses_a_desired_state_that_breaks_the_contract(change, field):
    doc = {
        "node": {"id": 3, "hostname": "gb-r01-t03"},
        "domain": {
            "uid": "0b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11",
            "name": "team-a/train",
            "generation": 2,
            "request_id": "r-1",
            "index": 0,
            "peers": [{"index": 0, "ip": "10.0.0.1", "hostname": "gb-r01-t03"}],
            "imex": {"server_port": 50000, "cmd_port": 50005},
            "channels": {"mode": "Single", "numbers": [7]},
        },
        "release": None,
    }
    check_desired(doc)
    change(doc)
    with pytest.raises(MalformedDocument, match="desired state refused") as refused:
        check_desired(doc)
    assert field in str(refused.value)


def emulated_agent(tmp_path, node: Node, **gpu: str) -> Agent:
    facts = TrayFacts(
        hostname=node.hostname,
        ip=node.management_ip,
        cluster_uuid=node.clique.cluster_uuid,
        clique_id=node.clique.clique_id,
        gpus=[GpuFacts(index=i, uuid=f"GPU-c-{i}", **gpu) for i in range(4)],
    )
    root = prepare_tray(tmp_path / node.hostname, facts)
    config = AgentConfig(
        portal="http://portal.invalid",
        join_token=JOIN,
        root=root,
        hostname=node.hostname,
        ip=node.management_ip,
        fabric_facts=root / "run/nvidia-emu/fabric.json",
        imex_bin=["/bin/true"],
    )
    agent = Agent(config)
    agent.facts.probe()
    agent.facts.check_host()
    return agent


@pytest.mark.parametrize("state", ["COMPLETED", "IN_PROGRESS", "FAILED"])
def test_what_the_agent_sends_follows_the_contract_and_the_portal_takes_it(rack, tmp_path, state):
    node = rack.nodes.first()
    agent = emulated_agent(tmp_path, node, fabric_state=state)
    document = agent.facts.document()
    assert not list(CHECK["facts"].iter_errors(document))
    assert not list(CHECK["join"].iter_errors({**document, "join_token": JOIN}))
    resp = APIClient().post("/api/v1/agent/join/", {**document, "join_token": JOIN}, "json")
    assert resp.status_code == 201, resp.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['token']}")
    resp = client.put(f"/api/v1/agent/nodes/{node.pk}/facts/", document, format="json")
    assert resp.status_code == 200, resp.content
    for report in (
        agent.reporter.doc(uid=None, generation=0, step=Step.IDLE, clean=True),
        agent.reporter.doc(
            uid="0b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11",
            generation=3,
            step=Step.WAITING_PEERS,
            daemon_state="WAITING_FOR_PEERS",
            domain_state="DEGRADED",
            peers=[{"index": 1, "ip": "10.0.0.2", "status": "NEVER_CONNECTED"}],
            channels=[7],
            error="x" * 3000,
        ),
    ):
        assert not list(CHECK["report"].iter_errors(report))
        resp = client.post(f"/api/v1/agent/nodes/{node.pk}/status/", report, format="json")
        assert resp.status_code == 200, resp.content
