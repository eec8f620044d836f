"""With DEBUG off, Prometheus and the kubelet reach /metrics, /healthz and /readyz over plain
HTTP on the pod's address, as a ServiceMonitor and an httpGet probe ask; every other path is
still sent to HTTPS."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from testbed.processes import running, start_server
from tests.observability.conftest import METRICS_TOKEN as TOKEN
from tests.observability.conftest import production_env

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def production_portal(transactional_db, static_root) -> Iterator[str]:
    """A web process as the chart runs it: DEBUG and the test settings off, HTTPS redirect on."""
    proc, url = start_server(**production_env(static_root))
    with running(proc):
        yield url


def test_metrics_and_health_checks_answer_plain_http_while_other_paths_redirect(
    production_portal,
):
    with httpx.Client(base_url=production_portal, timeout=30) as http:
        metrics = http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert metrics.status_code == 200, metrics.text
        assert "portal_build_info" in metrics.text
        for path in ("/healthz", "/readyz"):
            resp = http.get(path)
            assert resp.status_code == 200, (path, resp.status_code, resp.text)
            assert resp.json()["status"] == "ok"
        # Not HTTPS: no HSTS on these answers.
        assert "strict-transport-security" not in metrics.headers
        # Exempt means exactly these paths: neighbours and everything else still redirect.
        for path in ("/", "/login/", "/api/v1/racks/", "/metrics/extra", "/healthz/x"):
            resp = http.get(path)
            assert resp.status_code == 301, (path, resp.status_code)
            assert resp.headers["location"].startswith("https://"), path


def test_metrics_over_plain_http_still_needs_the_token(production_portal):
    resp = httpx.get(f"{production_portal}/metrics", timeout=30)
    assert resp.status_code == 401
