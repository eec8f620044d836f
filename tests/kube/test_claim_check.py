"""A tray's claim checked against the real API server before it is admitted: kube-scheduler
allocates the pods' claims from the trays' slices, and the portal admits a claim only on
the tray it was allocated to, in the namespace it lives in, for the domain its template
names. A tray that names another tenant's claim, namespace or domain is refused, and the
refusal names nothing of that tenant."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from domains.agents.joining import agent_join
from domains.computedomains.models import DomainClaim
from domains.kube import tasks
from testbed.agents import ensure_join_token, node_facts
from testbed.kube.chartobjects import install_device_class, publish_as_its_agent
from testbed.kube.cluster import ClusterKube, wait_for
from testbed.kube.objects import claim_of, gpu_labels, pod_with_claim
from tests.support.lifecycle import request_and_place

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def agent_of(node) -> tuple[APIClient, str]:
    """The tray's agent: its node token, and the claims path it posts to."""
    _, raw = agent_join(join_token=ensure_join_token(), facts=node_facts(node))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    return client, f"/api/v1/agent/nodes/{node.pk}/claims/"


def scheduled_claim(kube: ClusterKube, pod: str, namespace: str, template: str) -> dict:
    kube.apply(pod_with_claim(pod, namespace, template))

    def allocated() -> dict[str, Any] | None:
        found = kube.get("pods", pod, namespace)
        claim = claim_of(kube, found) if found and found["spec"].get("nodeName") else None
        return claim if claim and (claim.get("status") or {}).get("allocation") else None

    return wait_for(allocated, what=f"{pod}'s claim to be allocated")


def ask(agent: tuple[APIClient, str], claim: dict, *, namespace: str = "", domain: str = ""):
    client, path = agent
    meta = claim["metadata"]
    body = {
        "claim": {
            "uid": meta["uid"],
            "namespace": namespace or meta["namespace"],
            "name": meta["name"],
        },
        "domain_uid": domain or meta["labels"]["portal.domains/domain-uid"],
    }
    return client.post(path, body, format="json")


def spread_claim(kube: ClusterKube, claim: dict, *, other: str) -> dict:
    """A claim like `claim` whose allocation (written as the scheduler writes one) holds its
    device and the same device of tray `other`'s pool too."""
    meta = claim["metadata"]
    copy = {
        "apiVersion": claim["apiVersion"],
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{meta['name']}-spread",
            "namespace": meta["namespace"],
            "labels": meta["labels"],
        },
        "spec": claim["spec"],
    }
    made = kube.apply(copy)
    allocation = json.loads(json.dumps(claim["status"]["allocation"]))
    results = allocation["devices"]["results"]
    results.append({**results[0], "pool": other})
    made["status"] = {"allocation": allocation}
    res = kube.resource("resourceclaims", claim["apiVersion"])
    return res.status.replace(body=made, namespace=meta["namespace"]).to_dict()


def test_a_claim_is_admitted_only_on_its_tray_for_its_domain(
    real_kube, cluster, topology, ns_a, tenant_a, ns_b, tenant_b
):
    install_device_class(real_kube)
    theirs = request_and_place(ns_b, tenant_b, name="b-train", num_nodes=2)
    ours = request_and_place(ns_a, tenant_a, name="a-train", num_nodes=2)
    members = {
        d.pk: [m.node for m in d.members.select_related("node").order_by("index")]
        for d in (theirs, ours)
    }
    for domain in (theirs, ours):
        assert tasks.publish_domain(domain.pk) == "created"

    def publish(nodes) -> None:
        for node in nodes:
            real_kube.put_node(node.hostname, gpu_labels())
            publish_as_its_agent(cluster, node)

    # team-b's pod, while only team-b's trays publish a channel: the scheduler allocates its
    # claim to one of them. Then team-a's trays publish theirs too.
    publish(members[theirs.pk])
    claim = scheduled_claim(real_kube, "b-worker", "team-b", theirs.resource_claim_template)
    publish(members[ours.pk])
    pool = claim["status"]["allocation"]["devices"]["results"][0]["pool"]
    trays = {n.hostname: n for nodes in members.values() for n in nodes}
    mine = trays[pool]
    others = [n for host, n in trays.items() if host != pool]

    # Another tray names that claim: refused, and it learns nothing of team-b's domain.
    for node in others:
        refused = ask(agent_of(node), claim)
        assert refused.status_code == 403, refused.content
        message = refused.json()["message"]
        assert f"is not allocated to tray {node.hostname}" in message
        assert "b-train" not in message and pool not in message

    # The tray it was allocated to, claiming it for another namespace or another domain.
    agent = agent_of(mine)
    wrong_ns = ask(agent, claim, namespace="team-a")
    assert wrong_ns.status_code == 403
    assert "does not exist in the cluster" in wrong_ns.json()["message"]
    wrong_domain = ask(agent, claim, domain=str(ours.uid))
    assert wrong_domain.status_code == 403
    assert "does not name ComputeDomain" in wrong_domain.json()["message"]
    assert not DomainClaim.objects.exists()

    # A claim whose allocation has a channel of this tray and one of another: every result
    # of our driver must be from the tray's own pool. Refused, naming no other tray.
    spread = spread_claim(real_kube, claim, other=others[0].hostname)
    refused = ask(agent, spread)
    assert refused.status_code == 403, refused.content
    assert "holds channels of other trays" in refused.json()["message"]
    assert others[0].hostname not in refused.json()["message"]

    # The truth, from the tray it was allocated to: admitted.
    assert mine in members[theirs.pk]
    admitted = ask(agent, claim)
    assert admitted.status_code == 200, admitted.content
    assert admitted.json()["domain_uid"] == str(theirs.uid)
    assert DomainClaim.objects.filter(claim_uid=claim["metadata"]["uid"]).count() == 1


def test_a_made_up_claim_cannot_join_another_tenants_following_domain(
    real_kube, topology, ns_a, ns_b, tenant_b
):
    from domains.audit.events import Actor
    from domains.computedomains.services import domain_request
    from domains.computedomains.specs import DomainSpec

    follow = domain_request(
        actor=Actor.for_user(tenant_b), namespace=ns_b, spec=DomainSpec(name="wl", num_nodes=0)
    )
    tray = topology.nodes.order_by("slot").first()
    forged = {
        "metadata": {
            "uid": "3f0c3c5e-5a4b-4a39-9d8e-6a0e4f3c2b1a",
            "namespace": "team-b",
            "name": "forged-channel",
            "labels": {"portal.domains/domain-uid": str(follow.uid)},
        }
    }
    refused = ask(agent_of(tray), forged)
    assert refused.status_code == 403, refused.content
    assert "does not exist in the cluster" in refused.json()["message"]
    assert not follow.members.exists() and not DomainClaim.objects.exists()


def test_a_prepared_claim_no_pod_holds_any_more_is_released_at_the_next_pass(
    real_kube, cluster, topology, ns_a, tenant_a
):
    """The pod is gone and its tray's kubelet never unprepared its claim (the tray died):
    the portal's pass over the live ResourceClaims releases it, with an audit event, and
    keeps the one a pod still holds."""
    from domains.audit.models import Event

    install_device_class(real_kube)
    domain = request_and_place(ns_a, tenant_a, name="sweep", num_nodes=2)
    assert tasks.publish_domain(domain.pk) == "created"
    for member in domain.members.select_related("node"):
        real_kube.put_node(member.node.hostname, gpu_labels())
        publish_as_its_agent(cluster, member.node)
    template = domain.resource_claim_template
    claims = {pod: scheduled_claim(real_kube, pod, "team-a", template) for pod in ("w0", "w1")}
    for claim in claims.values():
        tray = domain.members.get(node__hostname=claim["status"]["allocation"]["devices"]
                                  ["results"][0]["pool"]).node  # fmt: skip
        assert ask(agent_of(tray), claim).status_code == 200
    assert tasks.reconcile()["claims"] == 0  # both pods hold theirs

    real_kube.delete("pods", "w0", "team-a")  # its claim goes; nobody unprepares it
    gone = claims["w0"]["metadata"]["uid"]
    wait_for(
        lambda: not ((real_kube.get("resourceclaims", claims["w0"]["metadata"]["name"], "team-a")
                      or {}).get("status") or {}).get("allocation"),
        what="w0's claim deallocated (or deleted)",
    )  # fmt: skip
    assert tasks.reconcile()["claims"] == 1
    released = DomainClaim.objects.get(claim_uid=gone)
    assert released.released_at is not None
    # Deallocated, or already deleted with its pod by the garbage collector.
    assert "no pod holds it" in released.refusal or "gone from the cluster" in released.refusal
    event = Event.objects.get(domain=domain, verb="claim.released")
    assert event.message.startswith(f"ResourceClaim team-a/{claims['w0']['metadata']['name']}")
    kept = DomainClaim.objects.get(claim_uid=claims["w1"]["metadata"]["uid"])
    assert kept.released_at is None
