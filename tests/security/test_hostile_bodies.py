"""Hostile request bodies against the real server: JSON nested
100,000 deep on every JSON endpoint, bodies over the size limits, and a CSRF failure under
/api/. Each is answered 400/403/413 in the API's error shape, never a 500 or an HTML page."""

from __future__ import annotations

import json
import re

import pytest

from domains.agents.models import JoinToken
from domains.computedomains.models import Phase
from domains.inventory.models import Node
from domains.security import hash_token
from tests.api.conftest import make_domain
from tests.security.conftest import IP_PREFIX, JOIN, bearer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NESTED = b"[" * 100_000
JSON = {"Content-Type": "application/json"}


def _join(http, hostname: str = "sec-new-t1") -> tuple[dict[str, str], int]:
    JoinToken.objects.get_or_create(token_hash=hash_token(JOIN), defaults={"name": "security"})
    body = {"join_token": JOIN, "hostname": hostname, "ip": f"{IP_PREFIX}.9.1"}
    resp = http.post("/api/v1/agent/join/", json=body)
    assert resp.status_code == 201, resp.text
    return {"Authorization": f"Node {resp.json()['token']}"}, resp.json()["node_id"]


def _error(resp, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.text[:300])
    assert resp.headers["content-type"].startswith("application/json"), resp.text[:300]
    body = resp.json()
    assert set(body) >= {"code", "message"}
    if code:
        assert body["code"] == code, body
    return body


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "x"), path)


def test_json_nested_100000_deep_is_a_400_on_every_json_endpoint(
    http, server, fabric, ns_a, tenant_a, admin
):
    node_auth, node_id = _join(http)
    node = Node.objects.filter(rack=fabric).first()
    domain = make_domain(ns_a, "train-a", nodes=[node], requested_by=tenant_a)
    pending = make_domain(ns_a, "big-a", phase=Phase.PENDING)
    values = {
        "namespace": ns_a.name,
        "name": domain.name,
        "hostname": node.hostname,
        "label": node.clique.label,
        "uid": str(pending.uid),
        "node_id": str(node_id),
        "rack": fabric.name,
        "id": "1",
        "pk": "1",
    }
    admin_auth = bearer(admin)
    schema = http.get("/api/v1/schema/", headers={"Accept": "application/json"}).json()
    tried = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method not in ("post", "put", "patch") or "requestBody" not in operation:
                continue
            auth = node_auth if path.startswith("/api/v1/agent/") else admin_auth
            url = _fill(path, values)
            resp = http.request(method.upper(), url, content=NESTED, headers={**JSON, **auth})
            assert resp.status_code < 500, (method, url, resp.text[:300])
            _error(resp, resp.status_code)
            tried.append((method, path, resp.status_code))
    assert len(tried) >= 15, tried
    # The ones the attack found, each read the body and refused it as malformed.
    named = {
        ("post", "/api/v1/agent/join/"),
        ("post", "/api/v1/namespaces/{namespace}/computedomains/"),
        ("patch", "/api/v1/namespaces/{namespace}/quota/"),
        ("post", "/api/v1/tokens/"),
        ("post", "/api/v1/agent/nodes/{node_id}/status/"),
        ("put", "/api/v1/agent/nodes/{node_id}/facts/"),
    }
    assert {(m, p): s for m, p, s in tried if (m, p) in named} == dict.fromkeys(named, 400)
    assert "Traceback" not in server.log(), server.log()[-3000:]


def test_a_body_over_the_limits_is_a_413_in_the_error_shape(http, server, admin):
    auth = {**JSON, **bearer(admin)}
    padded = json.dumps({"name": "x", "pad": "y" * (1 << 20)}).encode()  # just over 1 MiB
    _error(http.post("/api/v1/tokens/", content=padded, headers=auth), 413, "too_large")
    huge = json.dumps({"name": "x", "pad": "y" * (3 << 20)}).encode()  # past Django's 2.5 MB
    _error(http.post("/api/v1/tokens/", content=huge, headers=auth), 413, "too_large")
    assert "Traceback" not in server.log()


def test_the_agent_fast_path_hands_a_nested_report_to_the_parser(http, server, db):
    node_auth, node_id = _join(http, "sec-new-t2")
    url = f"/api/v1/agent/nodes/{node_id}/status/"
    _error(http.post(url, content=NESTED, headers={**JSON, **node_auth}), 400, "malformed")
    report = {"generation_applied": 0, "step": "idle", "clean": True}
    assert http.post(url, json=report, headers=node_auth).status_code == 200
    assert "Traceback" not in server.log()


def test_a_csrf_failure_under_the_api_answers_json(http, server, db):
    body = _error(http.post("/api/v1/no-such-thing/", data={"a": "b"}), 403, "csrf_failed")
    assert "CSRF" in body["message"]
    # Outside the API, Django's own page, as before.
    page = http.post("/login/", data={"username": "x", "password": "y"})
    assert page.status_code == 403 and "text/html" in page.headers["content-type"]
