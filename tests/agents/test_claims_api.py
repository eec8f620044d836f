"""The agent API for DRA claims: `POST nodes/<id>/claims/` admits a claim on the tray,
`DELETE nodes/<id>/claims/<uid>/` lets go of it; a node token acts only for its node."""

from __future__ import annotations

import uuid

import jsonschema
import pytest
from rest_framework.test import APIClient

from domains.audit.models import Event
from domains.computedomains.models import DomainClaim
from nodeagent.protocol import CLAIM_ADMISSION_SCHEMA, CLAIM_REQUEST_SCHEMA
from tests.agents.test_agent_api import join, rack  # noqa: F401  (the fixture)
from tests.support.lifecycle import request_and_place

pytestmark = pytest.mark.django_db


def body(domain, namespace: str = "team-a", **claim: str) -> dict:
    doc = {
        "claim": {"uid": str(uuid.uuid4()), "namespace": namespace, "name": "w-0-channel", **claim},
        "domain_uid": str(domain.uid),
    }
    jsonschema.validate(doc, CLAIM_REQUEST_SCHEMA)  # what the agent sends is the contract
    return doc


@pytest.fixture
def placed(rack, ns_a, tenant_a):  # noqa: F811
    return request_and_place(ns_a, tenant_a, name="train", num_nodes=2)


def member_client(domain) -> tuple[APIClient, int]:
    node = domain.members.select_related("node").order_by("index").first().node
    return join(node)


def test_a_member_tray_admits_its_domains_claim_and_lets_go_of_it(placed):
    client, node_id = member_client(placed)
    doc = body(placed)
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", doc, format="json")
    assert resp.status_code == 200, resp.content
    jsonschema.validate(resp.json(), CLAIM_ADMISSION_SCHEMA)
    assert resp.json() == {
        "domain_uid": str(placed.uid),
        "domain_name": "team-a/train",
        "index": 0,
        "joined": False,
    }
    again = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", doc, format="json")
    assert again.status_code == 200  # the kubelet repeats prepares
    assert DomainClaim.objects.filter(released_at__isnull=True).count() == 1
    uid = doc["claim"]["uid"]
    assert client.delete(f"/api/v1/agent/nodes/{node_id}/claims/{uid}/").status_code == 204
    assert client.delete(f"/api/v1/agent/nodes/{node_id}/claims/{uid}/").status_code == 404
    verbs = list(Event.objects.filter(domain=placed).values_list("verb", flat=True))
    assert verbs.count("claim.prepared") == 1 and verbs.count("claim.unprepared") == 1


def test_a_claim_of_another_namespace_is_refused_and_nothing_recorded(placed):
    client, node_id = member_client(placed)
    resp = client.post(
        f"/api/v1/agent/nodes/{node_id}/claims/", body(placed, "team-b"), format="json"
    )
    assert resp.status_code == 403
    assert "can only use a domain of its own namespace" in resp.json()["message"]
    assert not DomainClaim.objects.exists()


def test_a_tray_that_is_not_a_member_of_a_placed_domain_is_refused(placed, rack):  # noqa: F811
    outsider = rack.nodes.exclude(memberships__domain=placed).first()
    client, node_id = join(outsider)
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", body(placed), format="json")
    assert resp.status_code == 409
    assert f"tray {outsider.hostname} is not one of the trays placed" in resp.json()["message"]
    assert not DomainClaim.objects.exists()


def test_an_unknown_domain_and_bad_input_are_named(placed):
    client, node_id = member_client(placed)
    doc = body(placed) | {"domain_uid": str(uuid.uuid4())}
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", doc, format="json")
    assert resp.status_code == 404 and "does not exist or has ended" in resp.json()["message"]
    bad = body(placed)
    bad["claim"]["namespace"] = "Not_A_Namespace"
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", bad, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "claim.namespace"


def test_a_node_token_cannot_admit_claims_for_another_tray(placed):
    mine, other = [m.node for m in placed.members.select_related("node").order_by("index")]
    client, _ = join(mine)
    resp = client.post(f"/api/v1/agent/nodes/{other.pk}/claims/", body(placed), format="json")
    assert resp.status_code == 403
    uid = uuid.uuid4()
    assert client.delete(f"/api/v1/agent/nodes/{other.pk}/claims/{uid}/").status_code == 403
    assert APIClient().post(f"/api/v1/agent/nodes/{other.pk}/claims/", {}).status_code == 401
