"""Input the API used to take quietly: negative, huge, empty or repeated paging values,
numbers sent as strings, text sent as numbers, unknown fields on the agent API. Each is a
400 naming the field."""

from __future__ import annotations

import pytest

from tests.api.conftest import bearer_client
from tests.security.conftest import JOIN

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=-1", "limit"), ("limit=0", "limit"), ("limit=1001", "limit"),
     ("offset=-5", "offset"), ("offset=99999999999999", "offset"), ("limit=1.0", "limit"),
     ("offset=abc", "offset"), ("limit=", "limit"), ("offset=", "offset"),
     ("limit=1&limit=2", "limit"), ("offset=" + "9" * 5000, "offset"), ("limit=%EF%BC%91", "limit"),
     ("domain=", "domain"), ("domain=%7B%7D", "domain")],
)  # fmt: skip
def test_bad_paging_is_a_400_naming_the_parameter(operator, query, field):
    resp = bearer_client(operator).get(f"/api/v1/events/?{query}")
    assert resp.status_code == 400, resp.content
    assert resp.json()["field"] == field


def test_good_paging_still_pages(operator):
    resp = bearer_client(operator).get("/api/v1/events/?limit=1000&offset=0")
    assert resp.status_code == 200


def test_a_number_sent_as_a_string_is_refused(ns_a, tenant_a):
    body = {"metadata": {"name": "train"}, "spec": {"numNodes": "3"}}
    resp = bearer_client(tenant_a).post(
        "/api/v1/namespaces/team-a/computedomains/", body, format="json"
    )
    assert resp.status_code == 400, resp.content
    assert resp.json()["field"] == "spec.numNodes"
    assert "number" in resp.json()["message"]


def test_text_sent_as_a_number_is_refused(tenant_a):
    resp = bearer_client(tenant_a).post("/api/v1/tokens/", {"name": 5}, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "name"


def test_the_agent_api_refuses_unknown_fields_naming_them(client):
    body = {"join_token": JOIN, "hostname": "sec-t1", "is_admin": True}
    resp = client.post("/api/v1/agent/join/", body, content_type="application/json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["field"] == "is_admin"


@pytest.mark.parametrize("huge", [2**63, 2**64 + 5, 10**30])
def test_ids_past_any_database_integer_are_refused_not_a_500(tenant_a, huge):
    # Found by bench/attack.py --examples 10 against `make demo`: the database refused it (a 500).
    client = bearer_client(tenant_a)
    resp = client.post("/api/v1/notifications/read/", {"ids": [huge]}, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["field"] == "ids.0"
    assert client.delete(f"/api/v1/tokens/{huge}/").status_code == 404
