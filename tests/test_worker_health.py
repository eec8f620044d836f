"""A real Celery worker serves its liveness and readiness probes."""

from __future__ import annotations

import httpx
import pytest

from testbed.processes import free_port, running, start_worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_running_worker_answers_its_health_probes():
    port = free_port()
    worker = start_worker(
        "health-worker", concurrency=1, PORTAL_WORKER_HEALTH_ADDR=f"127.0.0.1:{port}"
    )
    with running(worker):
        base = f"http://127.0.0.1:{port}"

        def answered() -> httpx.Response | None:
            try:
                return httpx.get(f"{base}/readyz", timeout=2)
            except httpx.HTTPError:
                return None

        ready = wait_until(answered, timeout=20, what="worker readiness probe")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"broker": "ok", "database": "ok"}
        live = httpx.get(f"{base}/healthz", timeout=2)
        assert live.status_code == 200
        assert live.json()["checks"]["beat_age_s"] < 30
        assert httpx.get(f"{base}/nope", timeout=2).status_code == 404
