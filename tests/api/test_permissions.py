"""The permission matrix: every endpoint and method, for anonymous, another tenant, own viewer,
own member, operator and admin. Another tenant gets 404 (not 403) for anything under a
namespace it cannot see, so names never leak."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from domains.audit.events import Actor
from domains.foresight.maintenance import maintenance_schedule
from domains.inventory.models import Node
from tests.api.conftest import ROLES


def _row(anonymous, other_tenant, viewer, member, operator, admin) -> dict[str, int]:
    return dict(zip(ROLES, (anonymous, other_tenant, viewer, member, operator, admin), strict=True))


SIGNED_IN = _row(401, 200, 200, 200, 200, 200)
NS_READ = _row(401, 404, 200, 200, 200, 200)


def ns_write(ok: int) -> dict[str, int]:
    return _row(401, 404, 403, ok, 403, ok)


def ns_admin(ok: int) -> dict[str, int]:
    return _row(401, 404, 403, 403, 403, ok)


def operators(ok: int) -> dict[str, int]:
    return _row(401, 403, 403, 403, ok, ok)


def admins(ok: int) -> dict[str, int]:
    return _row(401, 403, 403, 403, 403, ok)


NS = "/api/v1/namespaces/team-a"
CD = f"{NS}/computedomains"
CREATE_BODY = {"metadata": {"name": "new-one"}, "spec": {"numNodes": 2}}
REPLACE_BODY = {"tray": "gb-r01-t01", "with": "gb-r01-t09"}
WINDOW_BODY = {
    "rack": "gb-r01",
    "startsAt": "2099-01-01T00:00:00Z",
    "endsAt": "2099-01-01T04:00:00Z",
    "reason": "busbar inspection",
}

# (method, path, body, expected per role)
MATRIX: list[tuple[str, str, Any, dict[str, int]]] = [
    ("get", "/api/v1/racks/", None, SIGNED_IN),
    ("get", "/api/v1/racks/{rack}/", None, SIGNED_IN),
    ("get", "/api/v1/cliques/", None, SIGNED_IN),
    ("get", "/api/v1/cliques/{clique}/", None, SIGNED_IN),
    ("get", "/api/v1/nodes/", None, SIGNED_IN),
    ("get", "/api/v1/nodes/{node}/", None, SIGNED_IN),
    ("post", "/api/v1/nodes/{node}/cordon/", {"reason": "fan"}, operators(200)),
    ("post", "/api/v1/nodes/{cordoned}/uncordon/", {}, operators(200)),
    ("post", "/api/v1/nodes/{node}/drain/", {"reason": "swap"}, operators(200)),
    ("post", "/api/v1/nodes/{node}/mark-down/", {"reason": "dead"}, operators(200)),
    ("post", "/api/v1/nodes/{down}/mark-up/", {}, operators(200)),
    ("get", "/api/v1/nodes/{node}/blast-radius", None, SIGNED_IN),
    ("get", "/api/v1/racks/{rack}/blast-radius", None, SIGNED_IN),
    ("get", "/api/v1/cliques/{clique}/blast-radius", None, SIGNED_IN),
    ("get", "/api/v1/switchtrays/", None, SIGNED_IN),
    ("get", "/api/v1/switchtrays/{switch}/", None, SIGNED_IN),
    ("get", "/api/v1/switchtrays/{switch}/blast-radius", None, SIGNED_IN),
    ("post", "/api/v1/switchtrays/{switch}/state/", {"state": "down"}, operators(200)),
    ("get", "/api/v1/powershelves/", None, SIGNED_IN),
    ("get", "/api/v1/powershelves/{shelf}/", None, SIGNED_IN),
    ("get", "/api/v1/powershelves/{shelf}/blast-radius", None, SIGNED_IN),
    ("post", "/api/v1/powershelves/{shelf}/state/", {"state": "down"}, operators(200)),
    ("get", "/api/v1/namespaces/", None, SIGNED_IN),
    ("post", "/api/v1/namespaces/", {"name": "team-c"}, admins(201)),
    ("get", f"{NS}/", None, NS_READ),
    ("get", f"{NS}/members/", None, NS_READ),
    ("get", f"{NS}/members/alice/", None, NS_READ),
    ("put", f"{NS}/members/victor/", {"role": "member"}, ns_admin(200)),
    ("delete", f"{NS}/members/victor/", None, ns_admin(204)),
    ("get", f"{NS}/quota/", None, NS_READ),
    ("put", f"{NS}/quota/", {"maxGpus": 64, "maxNodes": 16}, ns_admin(200)),
    ("patch", f"{NS}/quota/", {"maxDomains": 5}, ns_admin(200)),
    ("get", f"{CD}/", None, NS_READ),
    ("post", f"{CD}/?dryRun=All", CREATE_BODY, ns_write(200)),
    ("post", f"{CD}/", CREATE_BODY, ns_write(201)),
    ("get", f"{CD}/train-a/", None, NS_READ),
    ("get", f"{CD}/train-a/events/", None, NS_READ),
    ("get", f"{CD}/train-a/manifests/", None, NS_READ),
    ("post", f"{CD}/train-a/extend/", {"by": "2h"}, ns_write(200)),
    # An operator replaces a tray of the domain with a free one of its clique (slot 9 is).
    ("post", f"{CD}/train-a/replace/", REPLACE_BODY, _row(401, 404, 403, 403, 200, 200)),
    ("delete", f"{CD}/train-a/", None, ns_write(202)),
    ("get", "/api/v1/maintenance/", None, SIGNED_IN),
    ("get", "/api/v1/maintenance/{window}/", None, SIGNED_IN),
    ("post", "/api/v1/maintenance/", WINDOW_BODY, operators(201)),
    ("post", "/api/v1/maintenance/{window}/cancel/", None, operators(200)),
    ("get", "/api/v1/events/", None, SIGNED_IN),
    ("get", "/api/v1/approvals/", None, admins(200)),
    ("get", "/api/v1/approvals/{uid}/", None, admins(200)),
    ("post", "/api/v1/approvals/{uid}/approve/", None, admins(200)),
    ("post", "/api/v1/approvals/{uid}/deny/", {"reason": "too big"}, admins(200)),
    ("get", "/api/v1/tokens/", None, SIGNED_IN),
    ("post", "/api/v1/tokens/", {"name": "ci"}, _row(401, 201, 201, 201, 201, 201)),
    ("delete", "/api/v1/tokens/{own_token}/", None, _row(401, 204, 204, 204, 204, 204)),
]


@pytest.fixture
def places(fabric, domain_a, domain_b, pending_a, clients, operator) -> dict[str, Any]:
    free = list(Node.objects.filter(rack=fabric, memberships__isnull=True).order_by("slot"))
    Node.objects.filter(pk=free[1].pk).update(state="cordoned")
    Node.objects.filter(pk=free[3].pk).update(state="down")
    window = maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=timezone.now() + timedelta(days=400),
        ends_at=timezone.now() + timedelta(days=401),
        reason="planned",
        trays=[free[2].hostname],
    )
    return {
        "window": window.pk,
        "rack": fabric.name,
        "clique": free[0].clique.label,
        "node": free[0].hostname,
        "cordoned": free[1].hostname,
        "down": free[3].hostname,
        "switch": f"{fabric.name}-s01",
        "shelf": f"{fabric.name}-p1",
        "uid": pending_a.uid,
    }


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    MATRIX,
    ids=[f"{m.upper()} {p}" for m, p, _, _ in MATRIX],
)
def test_permission_matrix(places, clients, role, method, path, body, expected) -> None:
    if "/manifests/" in path:
        pytest.importorskip("domains.kube.manifests", reason="workload manifests (H5) not in yet")
    client = clients[role]
    own_token = client.user.api_tokens.get().pk if role != "anonymous" else 1
    url = path.format(**places, own_token=own_token)
    response = getattr(client, method)(url, body, format="json")
    assert response.status_code == expected[role], (role, url, response.content[:300])
    if response.status_code >= 400:
        assert set(response.json()) >= {"code", "message"}


def test_other_tenants_namespace_reads_like_one_that_does_not_exist(clients, places) -> None:
    client = clients["other_tenant"]
    hidden = client.get(f"{CD}/train-a/").json()
    missing = client.get("/api/v1/namespaces/no-such-ns/computedomains/train-a/").json()
    assert hidden["code"] == missing["code"] == "not_found"


def test_tenants_see_trays_in_use_but_not_other_tenants_domain_names(
    clients, places, domain_a, domain_b
) -> None:
    nodes = clients["member"].get("/api/v1/nodes/").json()["results"]
    used = [n for n in nodes if n["inUse"]]
    assert len(used) == 4
    named = {n["domain"]["name"] for n in used if n["domain"]}
    assert named == {"train-a"}
    assert all(n["managementIp"] is None for n in nodes)
    assert b"secret-b" not in clients["member"].get("/api/v1/nodes/").content
    # nor an operator's cordon reason, tray software or IMEX daemon state
    hidden = ("stateReason", "driverVersion", "imexVersion", "daemonState")
    assert all(n[key] == "" for n in nodes for key in hidden)


def test_operators_see_every_domain_and_tray_address(clients, places) -> None:
    nodes = clients["operator"].get("/api/v1/nodes/").json()["results"]
    assert {n["domain"]["name"] for n in nodes if n["domain"]} == {"train-a", "secret-b"}
    assert all(n["managementIp"].startswith("127.14.") for n in nodes)


def test_event_log_shows_tenants_only_their_namespaces(clients, places, domain_a, domain_b) -> None:
    from domains.audit.events import SYSTEM, record_event

    record_event(actor=SYSTEM, verb="domain.test", obj=domain_a)
    record_event(actor=SYSTEM, verb="domain.test", obj=domain_b)
    seen = clients["member"].get("/api/v1/events/?verb=domain.test").json()["results"]
    assert [e["namespace"] for e in seen] == ["team-a"]
    everything = clients["operator"].get("/api/v1/events/?verb=domain.test").json()
    assert everything["count"] == 2


def test_namespaces_list_only_the_callers_own(clients, places) -> None:
    names = [n["name"] for n in clients["member"].get("/api/v1/namespaces/").json()["results"]]
    assert names == ["team-a"]
    mine = clients["viewer"].get(f"{NS}/").json()
    assert mine["myRole"] == "viewer"
    assert len(clients["operator"].get("/api/v1/namespaces/").json()["results"]) == 2


def test_one_users_token_is_not_found_for_another(clients, users, places) -> None:
    bobs = users["other_tenant"].api_tokens.get().pk
    response = clients["member"].delete(f"/api/v1/tokens/{bobs}/")
    assert response.status_code == 404
    assert clients["other_tenant"].get("/api/v1/racks/").status_code == 200


def test_namespace_admins_manage_members_but_not_quotas(ns_a, fabric, tenant_b) -> None:
    from testbed import factories
    from tests.api.conftest import bearer_client

    carol = factories.make_user("carol")
    factories.add_member(carol, ns_a, "admin")
    client = bearer_client(carol)
    added = client.put(f"{NS}/members/bob/", {"role": "viewer"}, format="json")
    assert added.status_code == 200
    assert added.json()["username"] == "bob" and added.json()["role"] == "viewer"
    assert client.delete(f"{NS}/members/bob/").status_code == 204
    assert client.patch(f"{NS}/quota/", {"maxGpus": 1000}, format="json").status_code == 403
    assert client.put(f"{NS}/members/nobody/", {"role": "viewer"}, format="json").status_code == 404
