"""Facts re-registered under the node token, and the tray conditions that come with them."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentwire.messages import ConditionType
from domains.agents.models import JoinToken
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.services import domain_dry_run
from domains.computedomains.specs import DomainSpec
from domains.inventory.models import Node, NodeCondition, NodeSource, NodeState
from domains.placement.model import TrayStatus
from domains.security import hash_token
from domains.tenancy.tokens import token_create
from testbed import factories

pytestmark = pytest.mark.django_db
JOIN = "dpj_facts-test-join-token"
NVML = {
    "type": ConditionType.NVML_UNAVAILABLE,
    "blocking": True,
    "message": "NVML unavailable: NVML Shared Library Not Found (libnvidia-ml.so.1 …)",
}
HOST_IMEX = {
    "type": ConditionType.HOST_IMEX_SERVICE,
    "blocking": True,
    "message": "the host's nvidia-imex.service is enabled (…)",
}


@pytest.fixture
def rack(db):
    (rack,) = factories.make_racks("4", ip_prefix=factories.tray_ip_prefix(14))
    JoinToken.objects.create(name="tests", token_hash=hash_token(JOIN))
    return rack


def facts(node: Node, **over: object) -> dict:
    body = {
        "hostname": node.hostname,
        "ip": node.management_ip,
        "gpus": [
            {"index": i, "uuid": f"GPU-{node.hostname}-{i}", "product": "NVIDIA GB200"}
            for i in range(4)
        ],
        "cluster_uuid": node.clique.cluster_uuid,
        "clique_id": node.clique.clique_id,
        "driver_version": "580.82.07",
        "channel_major": 237,
        "channel_count": 2048,
        "agent_version": "0.2.0",
        "conditions": [],
    }
    body.update(over)
    return body


def joined(node: Node, **over: object) -> APIClient:
    body = {**facts(node, **over), "join_token": JOIN}
    resp = APIClient().post("/api/v1/agent/join/", body, format="json")
    assert resp.status_code == 201, resp.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['token']}")
    return client


def put(client: APIClient, node: Node, body: dict):
    return client.put(f"/api/v1/agent/nodes/{node.pk}/facts/", body, format="json")


def status_of(node: Node) -> str:
    return next(
        t.status for c in topology_snapshot().cliques for t in c.trays if t.node_id == node.pk
    )


def verbs(node: Node) -> list[str]:
    return list(Event.objects.filter(node=node).order_by("id").values_list("verb", flat=True))


def test_a_blocking_condition_keeps_the_tray_out_of_placement_until_it_clears(rack, ns_a):
    node = rack.nodes.first()
    client = joined(node)
    assert put(client, node, facts(node, conditions=[NVML])).status_code == 200
    assert status_of(node) == TrayStatus.BLOCKED
    (condition,) = NodeCondition.objects.filter(node=node)
    assert condition.type == "NvmlUnavailable" and condition.blocking and condition.since
    result = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="all4", num_nodes=4))
    assert not result.placeable
    assert "1 held back by a tray condition (gb-r01-t01)" in " ".join(result.reasons)
    assert "node.condition_raised" in verbs(node)

    assert put(client, node, facts(node)).status_code == 200
    assert status_of(node) == TrayStatus.FREE
    assert not NodeCondition.objects.filter(node=node).exists()
    assert verbs(node)[-1] == "node.condition_cleared"


def test_a_new_tray_is_held_back_from_its_first_join(rack):
    node = rack.nodes.first()
    joined(node, conditions=[HOST_IMEX])
    assert status_of(node) == TrayStatus.BLOCKED


def test_a_condition_reported_again_keeps_its_since_and_writes_nothing(rack):
    node = rack.nodes.first()
    client = joined(node, conditions=[HOST_IMEX])
    since = NodeCondition.objects.get(node=node).since
    events = Event.objects.count()
    resp = put(client, node, facts(node, conditions=[HOST_IMEX]))
    assert resp.status_code == 200 and resp.json()["changed"] == []
    assert NodeCondition.objects.get(node=node).since == since
    assert Event.objects.count() == events


def test_changed_facts_are_re_registered_with_an_event(rack):
    node = rack.nodes.first()
    client = joined(node)
    resp = put(client, node, facts(node, driver_version="580.95.05"))
    assert resp.status_code == 200
    assert set(resp.json()["changed"]) == {"driver_version"}
    node.refresh_from_db()
    assert (node.driver_version, node.gpu_count, node.gpus.count()) == ("580.95.05", 4, 4)
    event = Event.objects.filter(node=node, verb="agent.facts_changed").get()
    assert event.details["driver_version"] == {"from": "580.82.07", "to": "580.95.05"}
    # Two GPUs fewer: the tray's GPU set is its identity, held for an operator
    # (tests/agents/test_identity.py).
    resp = put(client, node, facts(node, driver_version="580.95.05", gpus=facts(node)["gpus"][:2]))
    assert resp.json()["changed"] == ["gpus"]
    node.refresh_from_db()
    assert (node.gpu_count, node.gpus.count(), node.state) == (4, 4, NodeState.PENDING)


def test_a_probe_that_could_not_tell_never_empties_the_clique(rack):
    node = rack.nodes.first()
    clique = node.clique
    client = joined(node)
    unsure = facts(node, cluster_uuid="", clique_id=None, gpus=[], conditions=[NVML])
    assert put(client, node, unsure).status_code == 200
    node.refresh_from_db()
    assert node.clique == clique and node.gpus.count() == 4  # kept; the condition holds it
    in_progress = {
        "type": ConditionType.FABRIC_NOT_READY,
        "blocking": True,
        "message": "NVLink fabric registration not finished (GPU 0 IN_PROGRESS); probing again.",
    }
    gpus = [g | {"fabric_state": "IN_PROGRESS"} for g in facts(node)["gpus"]]
    put(
        client,
        node,
        facts(node, cluster_uuid="", clique_id=None, gpus=gpus, conditions=[in_progress]),
    )
    node.refresh_from_db()
    assert node.clique == clique and status_of(node) == TrayStatus.BLOCKED
    assert set(node.gpus.values_list("fabric_state", flat=True)) == {"IN_PROGRESS"}
    # a settled probe without multi-node NVLink would take it out of every clique: a change
    # of identity, held for an operator (tests/agents/test_identity.py)
    put(client, node, facts(node, cluster_uuid="", clique_id=None))
    node.refresh_from_db()
    assert node.clique == clique and node.state == NodeState.PENDING
    assert node.identity_hold["changes"]["clique"] == {"from": clique.label, "to": ""}


def test_a_clique_kubernetes_labelled_is_never_replaced_by_the_probe(rack):
    node = rack.nodes.first()
    clique = node.clique
    client = joined(node)
    Node.objects.filter(pk=node.pk).update(source=NodeSource.KUBERNETES)
    put(client, node, facts(node, cluster_uuid="", clique_id=None))  # settled, and "none"
    node.refresh_from_db()
    assert node.clique == clique


def test_a_failed_fabric_registration_is_a_state_the_portal_keeps(rack):
    node = rack.nodes.first()
    client = joined(node)
    gpus = facts(node)["gpus"]
    gpus[1] = gpus[1] | {"fabric_state": "FAILED"}
    failed = {
        "type": ConditionType.FABRIC_FAILED,
        "blocking": True,
        "message": "NVLink fabric registration failed: GPU 1 (…): Insufficient Resources.",
    }
    assert put(client, node, facts(node, gpus=gpus, conditions=[failed])).status_code == 200
    assert node.gpus.get(index=1).get_fabric_state_display() == "Registration failed"


@pytest.mark.parametrize(
    ("over", "field", "status"),
    [
        ({"hostname": "someone-else"}, "hostname", 409),
        ({"conditions": [{"type": "lower", "blocking": True, "message": "x"}]}, "conditions", 400),
        ({"conditions": [NVML, NVML]}, "conditions", 400),
        ({"gpus": [{"index": 0, "uuid": "GPU-0", "fabric_state": "DANCING"}]}, "gpus", 400),
        # The contract's checks, which the agent's schema always had: a cluster is a UUID.
        ({"cluster_uuid": "not-a-cluster-uuid-of-36-characters!"}, "cluster_uuid", 400),
        ({"clique_id": 2**31}, "clique_id", 400),
    ],
)
def test_bad_facts_are_refused_naming_the_field_and_change_nothing(rack, over, field, status):
    node = rack.nodes.first()
    client = joined(node)
    resp = put(client, node, facts(node, driver_version="999", **over))
    assert resp.status_code == status and resp.json()["field"].startswith(field), resp.content
    node.refresh_from_db()
    assert node.driver_version == "580.82.07"


def test_an_ip_of_another_tray_is_refused(rack):
    mine, other = list(rack.nodes.order_by("slot"))[:2]
    client = joined(mine)
    resp = put(client, mine, facts(mine, ip=other.management_ip))
    assert resp.status_code == 409 and resp.json()["field"] == "ip"


def test_a_node_token_updates_only_its_own_trays_facts(rack):
    mine, other = list(rack.nodes.order_by("slot"))[:2]
    client = joined(mine)
    resp = put(client, other, facts(other, conditions=[NVML]))
    assert resp.status_code == 403
    assert not NodeCondition.objects.filter(node=other).exists()
    assert Event.objects.filter(verb="agent.access_denied", node=mine).exists()
    anonymous = APIClient().put(f"/api/v1/agent/nodes/{mine.pk}/facts/", facts(mine), "json")
    assert anonymous.status_code == 401


def test_operators_see_the_conditions_in_the_api_and_on_the_tray_page(rack, tenant_a, operator):
    node = rack.nodes.first()
    put(joined(node), node, facts(node, conditions=[NVML]))
    _, raw = token_create(actor=Actor.for_user(operator), user=operator, name="ops")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    (shown,) = api.get(f"/api/v1/nodes/{node.hostname}/").json()["conditions"]
    assert shown["type"] == "NvmlUnavailable" and shown["blocking"] and shown["since"]
    assert "libnvidia-ml.so.1" in shown["message"]
    tenant = APIClient()
    tenant.force_login(tenant_a)
    assert tenant.get(f"/api/v1/nodes/{node.hostname}/").json()["conditions"] == []
    page = APIClient()
    page.force_login(operator)
    html = page.get(f"/fabric/nodes/{node.hostname}/").content.decode()
    assert "NvmlUnavailable" in html and "not placeable" in html


def test_facts_left_out_are_read_as_the_contracts_defaults(rack):
    node = rack.nodes.first()
    client = joined(node)
    known_ip = node.management_ip
    bare = {
        "hostname": node.hostname,
        "cluster_uuid": node.clique.cluster_uuid,
        "clique_id": node.clique.clique_id,
    }
    assert put(client, node, bare).status_code == 200
    node.refresh_from_db()
    assert (node.channel_count, node.channel_major, node.agent_version) == (2048, None, "")
    assert node.management_ip == known_ip  # an IP left out ("") keeps the known one
