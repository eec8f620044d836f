"""ComputeDomains over the API: NVIDIA's object shape in and out, dry runs, conflicts,
quota refusals, release and lease extension, and a clear 400 for every bad field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain, Phase
from domains.inventory.models import Node

CD = "/api/v1/namespaces/team-a/computedomains/"
REFERENCE = Path(__file__).resolve().parents[1] / "fixtures/nvidia/nvidia-channel-injection.yaml"
NVIDIA_MANIFEST = {  # the first document of NVIDIA's channel-injection example
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "imex-channel-injection"},
    "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
}


@pytest.fixture
def member(clients):
    return clients["member"]


def test_a_nvidia_manifest_converted_to_json_creates_a_domain(member, fabric) -> None:
    assert next(yaml.safe_load_all(REFERENCE.read_text())) == NVIDIA_MANIFEST
    response = member.post(CD, NVIDIA_MANIFEST, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert body["kind"] == "ComputeDomain"
    assert body["metadata"]["name"] == "imex-channel-injection"
    assert body["metadata"]["namespace"] == "team-a"
    assert body["spec"]["numNodes"] == 1
    assert body["spec"]["channel"] == {
        "resourceClaimTemplate": {"name": "imex-channel-0"},
        "allocationMode": "Single",
    }
    assert body["spec"]["placement"] == {"constraint": "any", "target": ""}
    assert body["status"]["status"] == "NotReady"
    assert body["status"]["phase"] == Phase.ADMITTED
    admitted = next(c for c in body["status"]["conditions"] if c["type"] == "Admitted")
    assert admitted["status"] == "True" and admitted["lastTransitionTime"]
    domain = ComputeDomain.objects.get(uid=body["metadata"]["uid"])
    assert domain.source == "api" and domain.requested_by.username == "alice"


def test_our_placement_and_lifetime_fields_round_trip(member, fabric) -> None:
    body = {
        "metadata": {"name": "pinned", "labels": {"team": "vision"}},
        "spec": {
            "numNodes": 2,
            "gpusPerNode": 2,
            "channel": {"allocationMode": "All"},
            "placement": {"constraint": "rack", "target": fabric.name},
            "lifetime": "1h30m",
        },
    }
    created = member.post(CD, body, format="json").json()
    assert created["metadata"]["labels"] == {"team": "vision"}
    assert created["spec"]["gpusPerNode"] == 2
    assert created["spec"]["channel"]["allocationMode"] == "All"
    assert created["spec"]["channel"]["resourceClaimTemplate"]["name"] == "pinned-channel"
    assert created["spec"]["placement"] == {"constraint": "rack", "target": fabric.name}
    assert created["spec"]["lifetime"] == "1h30m"


def test_a_ready_domain_reads_like_nvidias_status(member, domain_a) -> None:
    body = member.get(f"{CD}train-a/").json()
    assert body["status"]["status"] == "Ready"
    nodes = body["status"]["nodes"]
    members = list(domain_a.members.select_related("node", "clique").order_by("index"))
    assert [n["name"] for n in nodes] == [m.node.hostname for m in members]
    assert nodes[0] | {"message": "", "step": ""} == {
        "name": members[0].node.hostname,
        "ipAddress": members[0].ip_address,
        "cliqueID": members[0].clique.label,
        "cliqueName": members[0].clique.name,
        "index": 0,
        "status": "Ready",
        "state": "ready",
        "step": "",
        "message": "",
        "stateChangedAt": nodes[0]["stateChangedAt"],
    }
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["reason"] == "AllMembersReady"


def test_dry_run_answers_the_placement_and_creates_nothing(member, fabric) -> None:
    body = {"metadata": {"name": "maybe"}, "spec": {"numNodes": 4}}
    response = member.post(f"{CD}?dryRun=All", body, format="json")
    assert response.status_code == 200
    result = response.json()
    assert result["dryRun"] == "All"
    assert result["placeable"] and result["quotaOk"]
    assert len(result["placement"]["nodes"]) == 4
    assert result["placement"]["rack"] == fabric.name
    assert result["quotaImpact"]["nodes"] == {"used": 0, "requested": 4, "limit": 12}
    assert not ComputeDomain.objects.exists()


def test_dry_run_says_why_not_when_nothing_fits(member, fabric) -> None:
    Node.objects.filter(rack=fabric).update(state="cordoned")
    body = {"metadata": {"name": "maybe"}, "spec": {"numNodes": 4}}
    result = member.post(f"{CD}?dryRun=All", body, format="json").json()
    assert result["placeable"] is False and result["placement"] is None
    assert result["reasons"] and result["message"]
    assert not ComputeDomain.objects.exists()


def test_a_taken_name_is_a_409_naming_the_field(member, domain_a) -> None:
    body = {"metadata": {"name": "train-a"}, "spec": {"numNodes": 1}}
    response = member.post(CD, body, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "name_taken"
    assert response.json()["field"] == "metadata.name"


def test_over_quota_is_a_422_and_creates_nothing(member, fabric, ns_a) -> None:
    # team-a may hold 12 trays; 8 + 8 does not fit.
    first = {"metadata": {"name": "one"}, "spec": {"numNodes": 8}}
    second = {"metadata": {"name": "two"}, "spec": {"numNodes": 8}}
    assert member.post(CD, first, format="json").status_code == 201
    response = member.post(CD, second, format="json")
    assert response.status_code == 422
    assert response.json()["code"] == "quota_exceeded"
    assert not ComputeDomain.objects.filter(name="two").exists()


def test_delete_releases_and_is_idempotent(member, domain_a) -> None:
    first = member.delete(f"{CD}train-a/")
    assert first.status_code == 202
    assert first.json()["status"]["phase"] in {Phase.RELEASING, Phase.RELEASED}
    again = member.delete(f"{CD}train-a/")
    assert again.status_code == 202
    assert again.json()["metadata"]["uid"] == str(domain_a.uid)


def test_extend_moves_the_lease(member, domain_a) -> None:
    before = domain_a.lease_expires_at
    response = member.post(f"{CD}train-a/extend/", {"by": "2h"}, format="json")
    assert response.status_code == 200, response.json()
    domain_a.refresh_from_db()
    assert domain_a.lease_expires_at - before == timedelta(hours=2)


def test_listing_domains_costs_the_same_queries_for_many(
    member, fabric, ns_a, django_assert_max_num_queries
) -> None:
    from tests.api.conftest import make_domain

    nodes = list(Node.objects.filter(rack=fabric).order_by("slot"))
    for i in range(6):
        make_domain(ns_a, f"d{i}", nodes=nodes[2 * i : 2 * i + 2])
    with django_assert_max_num_queries(8):
        body = member.get(CD).json()
    assert body["count"] == 6
    assert all(len(d["status"]["nodes"]) == 2 for d in body["results"])


def test_phase_filter(member, domain_a, pending_a) -> None:
    body = member.get(f"{CD}?phase=Pending").json()
    assert [d["metadata"]["name"] for d in body["results"]] == ["big-a"]


def test_domain_events_are_its_timeline(member, fabric) -> None:
    body = {"metadata": {"name": "timeline"}, "spec": {"numNodes": 1}}
    assert member.post(CD, body, format="json").status_code == 201
    events = member.get(f"{CD}timeline/events/").json()["results"]
    assert "domain.requested" in {e["verb"] for e in events}
    assert all(e["domain"] == "timeline" for e in events)


def test_admins_approve_and_deny_waiting_requests(clients, pending_a, ns_a, tenant_a) -> None:
    from tests.api.conftest import make_domain

    admin = clients["admin"]
    listed = admin.get("/api/v1/approvals/").json()["results"]
    assert [d["metadata"]["name"] for d in listed] == ["big-a"]
    approved = admin.post(f"/api/v1/approvals/{pending_a.uid}/approve/")
    assert approved.status_code == 200, approved.json()
    assert approved.json()["status"]["approval"] == "approved"
    other = make_domain(ns_a, "bigger", phase=Phase.PENDING, approval="pending")
    denied = admin.post(f"/api/v1/approvals/{other.uid}/deny/", {"reason": "no"}, format="json")
    assert denied.status_code == 200
    assert denied.json()["status"]["approval"] == "denied"
    assert admin.get("/api/v1/approvals/").json()["count"] == 0


def test_operators_cordon_and_drain_trays(clients, fabric) -> None:
    op = clients["operator"]
    node = Node.objects.filter(rack=fabric).order_by("slot").first()
    cordoned = op.post(f"/api/v1/nodes/{node.hostname}/cordon/", {"reason": "fan"}, format="json")
    assert cordoned.status_code == 200
    assert cordoned.json()["state"] == "cordoned"
    back = op.post(f"/api/v1/nodes/{node.hostname}/uncordon/", format="json")
    assert back.json()["state"] == "ready"


def test_tray_actions_that_change_nothing_are_refused_with_a_message(clients, fabric) -> None:
    op = clients["operator"]
    node = Node.objects.filter(rack=fabric).order_by("slot").first()
    again = op.post(f"/api/v1/nodes/{node.hostname}/uncordon/", format="json")
    assert again.status_code == 409
    assert again.json()["message"] == f"{node.hostname} is ready already: uncordon changes nothing."
    assert op.post(f"/api/v1/nodes/{node.hostname}/mark-up/", format="json").status_code == 409


def test_a_tray_whose_domain_runs_is_drained_before_it_is_marked_down(
    clients, fabric, tenant_a, ns_a
) -> None:
    from tests.support.lifecycle import form, request_domain

    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    node = domain.members.order_by("index").first().node
    op = clients["operator"]
    url = f"/api/v1/nodes/{node.hostname}"
    refused = op.post(f"{url}/mark-down/", {"reason": "dead"}, format="json")
    assert refused.status_code == 409
    assert "drain it first" in refused.json()["message"]
    assert Node.objects.get(pk=node.pk).state == "ready"
    assert op.post(f"{url}/drain/", {"reason": "PSU"}, format="json").status_code == 200
    down = op.post(f"{url}/mark-down/", {"reason": "dead"}, format="json")
    assert down.status_code == 200 and down.json()["state"] == "down"
    domain.refresh_from_db()
    assert domain.phase == "Degraded"
    assert Event.objects.filter(verb="node.marked_down", object_id=str(node.pk)).exists()
    up = op.post(f"{url}/mark-up/", {"reason": "PSU swapped"}, format="json")
    assert up.status_code == 200 and up.json()["state"] == "unknown"
    assert Event.objects.filter(verb="node.marked_up").count() == 1


def test_quota_put_replaces_and_patch_changes_only_what_is_given(clients, ns_a) -> None:
    admin = clients["admin"]
    url = "/api/v1/namespaces/team-a/quota/"
    patched = admin.patch(url, {"maxDomains": 9, "maxLifetime": "48h"}, format="json").json()
    assert patched["maxDomains"] == 9 and patched["maxGpus"] == 48
    assert patched["maxLifetime"] == "48h"
    replaced = admin.put(url, {"maxGpus": 8}, format="json").json()
    assert replaced["maxGpus"] == 8 and replaced["maxDomains"] is None
    assert replaced["usage"] == {"gpus": 0, "nodes": 0, "domains": 0}


# --- bad input: every writable field ---------------------------------------------------------


def _create_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "ok"}, "spec": {"numNodes": 2}}
    for path, value in overrides.items():
        *parents, leaf = path.split("__")
        node = body
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return body


RCT = "spec__channel__resourceClaimTemplate"
BAD_CREATE = [
    ("apiVersion", {"apiVersion": "v1"}),
    ("kind", {"kind": "Pod"}),
    ("metadata", {"metadata": "x"}),
    ("metadata.name", {"metadata__name": "Bad_Name"}),
    ("metadata.name", {"metadata__name": "x" * 64}),
    ("metadata.name", {"metadata__name": ""}),
    ("metadata.name", {"metadata__name": 7}),
    ("metadata.namespace", {"metadata__namespace": "team-b"}),
    ("metadata.labels", {"metadata__labels": ["a"]}),
    ("metadata.labels", {"metadata__labels": {"bad key!": "x"}}),
    ("metadata.labels", {"metadata__labels": {"ok": "bad value!"}}),
    ("metadata.labels.ok", {"metadata__labels": {"ok": 5}}),
    ("metadata.annotations", {"metadata__annotations": {}}),
    ("spec", {"spec": []}),
    ("spec.numNodes", {"spec__numNodes": -1}),
    ("spec.numNodes", {"spec__numNodes": "two"}),
    ("spec.numNodes", {"spec__numNodes": 1.5}),
    ("spec.numNodes", {"spec__numNodes": 19}),  # larger than any clique
    ("spec.numNodes", {"spec__numNodes": None}),
    ("spec.gpusPerNode", {"spec__gpusPerNode": 0}),
    ("spec.gpusPerNode", {"spec__gpusPerNode": 5}),  # a GB200 tray has 4
    ("spec.channel", {"spec__channel": "All"}),
    ("spec.channel.allocationMode", {"spec__channel__allocationMode": "Some"}),
    ("spec.channel.resourceClaimTemplate.name", {"spec__channel__resourceClaimTemplate": {}}),
    ("spec.channel.resourceClaimTemplate.name", {f"{RCT}__name": "Bad_Name"}),
    ("spec.channel.resourceClaimTemplate.extra", {f"{RCT}__name": "a", f"{RCT}__extra": 1}),
    ("spec.placement.constraint", {"spec__placement__constraint": "zone"}),
    ("spec.placement.target", {"spec__placement__constraint": "rack"}),
    ("spec.placement.target", {"spec__placement": {"constraint": "rack", "target": "nope"}}),
    ("spec.placement.target", {"spec__placement": {"target": "gb-r01"}}),
    ("spec.lifetime", {"spec__lifetime": "forever"}),
    ("spec.lifetime", {"spec__lifetime": "0s"}),
    ("spec.lifetime", {"spec__lifetime": 3600}),
    ("spec.lifetime", {"spec__lifetime": "99999h"}),
    ("spec.bogus", {"spec__bogus": True}),
    ("status", {"status": {"status": "Ready"}}),
    ("extra", {"extra": 1}),
]  # fmt: skip


@pytest.mark.parametrize(("field", "overrides"), BAD_CREATE, ids=[f for f, _ in BAD_CREATE])
def test_bad_create_input_is_a_400_naming_the_field(member, fabric, field, overrides) -> None:
    response = member.post(CD, _create_body(**overrides), format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["code"] == "invalid"
    assert body["field"] == field, body
    assert body["message"].startswith(f"{field}: ")
    assert not ComputeDomain.objects.exists()


def test_missing_sections_are_named(member, fabric) -> None:
    assert member.post(CD, {"spec": {"numNodes": 1}}, format="json").json()["field"] == "metadata"
    assert member.post(CD, {"metadata": {"name": "a"}}, format="json").json()["field"] == "spec"
    empty = member.post(CD, {"metadata": {}, "spec": {}}, format="json").json()
    fields = {e["field"] for e in empty["details"]["errors"]}
    assert fields == {"metadata.name", "spec.numNodes"}


@pytest.mark.parametrize(
    ("body", "content_type"),
    [("{not json", "application/json"), ("[1, 2]", "application/json"), ("a=b", "text/plain")],
)
def test_malformed_bodies_are_rejected_in_the_error_shape(member, body, content_type) -> None:
    response = member.generic("POST", CD, body, content_type=content_type)
    assert response.status_code in {400, 415}
    assert response.json()["code"] in {"malformed", "invalid", "unsupported_media_type"}


def test_unknown_dry_run_value_is_a_400(member, fabric) -> None:
    response = member.post(f"{CD}?dryRun=Some", _create_body(), format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "dryRun"


@pytest.mark.parametrize("by", ["", "soon", "-1h", "0s", 60, None, "999999h"])
def test_bad_extend_input_is_a_400(member, domain_a, by) -> None:
    response = member.post(f"{CD}train-a/extend/", {"by": by}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "by"


def test_extend_rejects_unknown_fields(member, domain_a) -> None:
    response = member.post(f"{CD}train-a/extend/", {"by": "1h", "to": "x"}, format="json")
    assert response.json()["field"] == "to"


BAD_QUOTA = [
    ("maxGpus", -1),
    ("maxGpus", "many"),
    ("maxGpus", 1.5),
    ("maxNodes", 10**9),
    ("maxDomains", True),
    ("maxNodesPerDomain", [1]),
    ("approvalAboveNodes", -5),
    ("maxLifetime", "a week"),
    ("maxLifetime", 3600),
    ("maxCpus", 1),
]


@pytest.mark.parametrize(("field", "value"), BAD_QUOTA)
def test_bad_quota_input_is_a_400_naming_the_field(clients, ns_a, field, value) -> None:
    response = clients["admin"].patch(
        "/api/v1/namespaces/team-a/quota/", {field: value}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == field


@pytest.mark.parametrize("reason", ["x" * 301, 5, ["a"]])
def test_bad_reasons_are_a_400(clients, fabric, pending_a, reason) -> None:
    node = Node.objects.filter(rack=fabric).first()
    cordon = clients["operator"].post(
        f"/api/v1/nodes/{node.hostname}/cordon/", {"reason": reason}, format="json"
    )
    deny = clients["admin"].post(
        f"/api/v1/approvals/{pending_a.uid}/deny/", {"reason": reason}, format="json"
    )
    for response in (cordon, deny):
        assert response.status_code == 400
        assert response.json()["field"] == "reason"


def test_an_unknown_event_filter_uid_is_a_400(clients) -> None:
    response = clients["member"].get("/api/v1/events/?domain=not-a-uid")
    assert response.status_code == 400 and response.json()["field"] == "domain"


def test_admins_create_namespaces_with_a_quota(clients, db) -> None:
    body = {"name": "team-c", "displayName": "Team C", "quota": {"maxGpus": 16}}
    created = clients["admin"].post("/api/v1/namespaces/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["displayName"] == "Team C"
    quota = clients["admin"].get("/api/v1/namespaces/team-c/quota/").json()
    assert quota["maxGpus"] == 16 and quota["maxNodes"] is None
    again = clients["admin"].post("/api/v1/namespaces/", body, format="json")
    assert again.status_code == 409 and again.json()["field"] == "name"


BAD_NAMESPACE = [
    ("name", {"name": "Team_C"}),
    ("name", {"name": ""}),
    ("name", {}),
    ("displayName", {"name": "ok", "displayName": 3}),
    ("labels", {"name": "ok", "labels": {"bad key!": "x"}}),
    ("quota.maxGpus", {"name": "ok", "quota": {"maxGpus": -1}}),
    ("quota.maxCpus", {"name": "ok", "quota": {"maxCpus": 1}}),
    ("owner", {"name": "ok", "owner": "me"}),
]


@pytest.mark.parametrize(("field", "body"), BAD_NAMESPACE)
def test_bad_namespace_input_is_a_400_naming_the_field(clients, db, field, body) -> None:
    response = clients["admin"].post("/api/v1/namespaces/", body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == field


@pytest.mark.parametrize(
    ("field", "body"),
    [("role", {"role": "owner"}), ("role", {}), ("x", {"role": "viewer", "x": 1})],
)
def test_bad_membership_input_is_a_400_naming_the_field(clients, ns_a, field, body) -> None:
    response = clients["admin"].put(
        "/api/v1/namespaces/team-a/members/victor/", body, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == field


def test_paths_work_with_and_without_the_trailing_slash_like_kubectl(member, domain_a) -> None:
    for path in (CD, CD.rstrip("/"), f"{CD}{domain_a.name}", f"{CD}{domain_a.name}/manifests"):
        assert member.get(path).status_code == 200, path


def test_manifests_of_a_following_domain_take_the_pods_wanted(member, fabric, domain_a) -> None:
    body = {"metadata": {"name": "wl"}, "spec": {"numNodes": 0}}
    assert member.post(CD, body, format="json").status_code == 201
    default = member.get(f"{CD}wl/manifests/").json()
    # team-a may hold 12 trays in one domain: as large as it may be, until told otherwise
    assert yaml.safe_load(default["deployment"].split("\n", 3)[3])["spec"]["replicas"] == 12
    four = member.get(f"{CD}wl/manifests/?replicas=4").json()
    assert yaml.safe_load(four["deployment"].split("\n", 3)[3])["spec"]["replicas"] == 4
    for bad, words in (("0", "from 1 to 12"), ("13", "from 1 to 12"), ("x", "whole number")):
        resp = member.get(f"{CD}wl/manifests/?replicas={bad}")
        assert resp.status_code == 400 and resp.json()["field"] == "replicas"
        assert words in resp.json()["message"]
    resp = member.get(f"{CD}{domain_a.name}/manifests/?replicas=3")
    assert (
        resp.status_code == 400
        and "applies only to a domain that follows" in (resp.json()["message"])
    )
