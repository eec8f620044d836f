"""The TLS rules in production: plain HTTP is redirected to HTTPS on the pages, the API and
the agent API (its fast path included); HTTPS answers carry HSTS. /metrics and the health
checks answer plain HTTP inside the cluster (tests/observability/test_plain_http.py). HTTPS
is what a trusted proxy says (PORTAL_TRUSTED_PROXIES), never what any client claims."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from domains.agents.models import JoinToken
from domains.security import hash_token
from testbed.processes import running, start_server
from tests.security.conftest import IP_PREFIX, JOIN
from tests.support.staticfiles import collected_static

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PATHS = ["/", "/login/", "/api/v1/racks/", "/django-admin/"]


def production(**env: str) -> dict[str, str]:
    """A web process as production runs it: DEBUG and the test settings off."""
    return {
        "PORTAL_TESTING": "0",
        "DEBUG": "0",
        "SECRET_KEY": "tls-test-" + uuid.uuid4().hex * 2,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "STATIC_ROOT": collected_static(),
        # The emulated trays' loopback addresses, as an operator of this test bed allows them.
        "PORTAL_TRAY_ALLOWED_NETS": "127.0.0.0/8",
        **env,
    }


@pytest.fixture
def portal(transactional_db) -> Iterator[str]:
    proc, url = start_server(**production(PORTAL_TRUSTED_PROXIES="127.0.0.1"))
    with running(proc):
        yield url


def agent(url: str) -> tuple[int, dict[str, str]]:
    JoinToken.objects.get_or_create(token_hash=hash_token(JOIN), defaults={"name": "security"})
    body = {"join_token": JOIN, "hostname": "sec-tls-t1", "ip": f"{IP_PREFIX}.9.9"}
    resp = httpx.post(
        f"{url}/api/v1/agent/join/", json=body, headers={"X-Forwarded-Proto": "https"}
    )
    assert resp.status_code == 201, resp.text
    return resp.json()["node_id"], {"Authorization": f"Node {resp.json()['token']}"}


def test_plain_http_is_redirected_on_every_other_path_and_https_gets_hsts(portal):
    node_id, auth = agent(portal)
    desired = f"/api/v1/agent/nodes/{node_id}/desired/"
    status = f"/api/v1/agent/nodes/{node_id}/status/"
    report = {"generation_applied": 0, "step": "idle", "clean": True}
    with httpx.Client(base_url=portal, timeout=30) as http:
        for path in [*PATHS, desired, "/api/v1/agent/join/"]:
            resp = http.get(path, headers=auth)
            assert resp.status_code == 301, (path, resp.status_code)
            assert resp.headers["location"].startswith("https://"), path
        assert http.post(status, json=report, headers=auth).status_code == 301  # fast path too
        # Behind the trusted proxy, HTTPS: answered, with HSTS, the fast path included.
        https = {"X-Forwarded-Proto": "https", **auth}
        for path in [desired, "/healthz", "/metrics"]:
            resp = http.get(path, headers=https)
            assert resp.status_code != 301, path
            assert "max-age=" in resp.headers.get("strict-transport-security", ""), path
        resp = http.post(status, json=report, headers=https)
        assert resp.status_code == 200 and "strict-transport-security" in resp.headers


def test_a_client_claiming_https_itself_is_still_redirected(transactional_db):
    proc, url = start_server(**production())  # no trusted proxy
    with running(proc), httpx.Client(base_url=url, timeout=30) as http:
        for path in ["/", "/api/v1/racks/", "/api/v1/agent/join/"]:
            resp = http.get(path, headers={"X-Forwarded-Proto": "https"})
            assert resp.status_code == 301, path
