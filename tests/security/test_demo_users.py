"""Demo users are inert with DEBUG off: no password, no session, no
API token; nor does the demo's well-known join token register a tray. The real server runs
with DEBUG off, as production does."""

from __future__ import annotations

import httpx
import pytest
from rest_framework.test import APIClient

from domains.agents.joining import DEMO_JOIN_TOKEN
from domains.agents.models import JoinToken
from domains.security import hash_token
from domains.tenancy.seed import DEMO_PASSWORD, build_demo_tenants
from testbed import factories
from testbed.processes import running, start_server
from tests.security.conftest import JOIN, bearer

pytestmark = pytest.mark.django_db


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_demo_users_token_is_refused_with_debug_off(http):
    build_demo_tenants()
    from django.contrib.auth.models import User

    alice = User.objects.get(username="alice")
    resp = http.get("/api/v1/namespaces/", headers=bearer(alice))
    assert resp.status_code == 401, resp.text
    assert resp.json()["code"] == "authentication_failed"
    # Nor does the well-known password open a session.
    page = http.get("/login/")
    csrf = page.cookies["csrftoken"]
    signed = http.post(
        "/login/",
        data={"username": "alice", "password": DEMO_PASSWORD, "csrfmiddlewaretoken": csrf},
    )
    assert signed.status_code == 200 and "sessionid" not in signed.cookies
    # Anyone else's token works as always.
    carol = factories.make_user("carol")
    assert http.get("/api/v1/namespaces/", headers=bearer(carol)).status_code == 200


def test_a_demo_users_token_works_in_debug(settings):
    settings.DEBUG = True
    build_demo_tenants()
    from django.contrib.auth.models import User

    client = APIClient()
    client.credentials(
        **{"HTTP_AUTHORIZATION": bearer(User.objects.get(username="bob"))["Authorization"]}
    )
    assert client.get("/api/v1/namespaces/").status_code == 200


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_demo_join_token_is_refused_with_debug_off(fabric):
    # As `make demo` has it: the setting, and the JoinToken row seed_demo registers from it.
    JoinToken.objects.create(token_hash=hash_token(DEMO_JOIN_TOKEN), name="demo agents")
    JoinToken.objects.create(token_hash=hash_token(JOIN), name="the operator's own")
    tray = fabric.nodes.order_by("slot").first()
    proc, url = start_server(PORTAL_AGENT_JOIN_TOKEN=DEMO_JOIN_TOKEN)
    with running(proc), httpx.Client(base_url=url, timeout=30) as http:
        body = {"hostname": tray.hostname, "ip": tray.management_ip}
        refused = http.post("/api/v1/agent/join/", json={**body, "join_token": DEMO_JOIN_TOKEN})
        assert refused.status_code == 403, refused.text
        assert refused.json()["field"] == "join_token"
        assert "DEBUG" in refused.json()["message"]
        joined = http.post("/api/v1/agent/join/", json={**body, "join_token": JOIN})
        assert joined.status_code == 201, joined.text
    assert JoinToken.objects.get(name="demo agents").uses == 0


def test_the_demo_join_token_works_in_debug(settings, fabric):
    settings.DEBUG = True
    settings.PORTAL = {**settings.PORTAL, "AGENT_JOIN_TOKEN": DEMO_JOIN_TOKEN}
    tray = fabric.nodes.order_by("slot").first()
    body = {"hostname": tray.hostname, "join_token": DEMO_JOIN_TOKEN}
    resp = APIClient().post("/api/v1/agent/join/", body, format="json")
    assert resp.status_code == 201, resp.content


def test_the_deploy_check_names_the_demo_join_token_with_debug_off(settings):
    from django.core import checks

    def ours() -> list[str]:
        found = checks.run_checks(tags=["security"], include_deployment_checks=True)
        return [m.id for m in found if m.id.startswith("agents.")]

    settings.PORTAL = {**settings.PORTAL, "AGENT_JOIN_TOKEN": DEMO_JOIN_TOKEN}
    settings.DEBUG = False
    assert ours() == ["agents.W001"]
    settings.DEBUG = True
    assert ours() == []
    settings.DEBUG = False
    settings.PORTAL = {**settings.PORTAL, "AGENT_JOIN_TOKEN": "dpj_" + "x" * 32}
    assert ours() == []
