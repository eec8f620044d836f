"""/readyz fails only for what the web process cannot work without (the database, Redis);
everything else degrades the portal's health, which it reports without failing."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

import portal.health
from testbed.agents import wait_for
from testbed.processes import ROOT, process_env, running, start_server
from testbed.services import PrivatePostgres, PrivateRedis


@pytest.fixture
def fresh_probe():
    portal.health._watch.read_at = 0.0  # read the condition on this probe, not 15 s ago's
    yield
    portal.health._watch.read_at = 0.0


@pytest.mark.django_db
def test_it_stays_ready_with_no_worker_running_and_says_the_portal_is_degraded(client, fresh_probe):
    answer = client.get("/readyz")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["checks"] == {"database": "ok", "redis": "ok"}
    assert body["health"] == {"status": "degraded", "parts": ["workers"]}


def _migrate(url: str) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=process_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _readyz(url: str) -> httpx.Response:
    return httpx.get(f"{url}/readyz", timeout=60)


@pytest.mark.e2e
def test_it_fails_while_the_database_is_stopped_and_recovers_when_it_returns():
    with PrivatePostgres() as pg:
        pg.create_database("portal")
        url = pg.url("portal")
        _migrate(url)
        server, base = start_server(
            DATABASE_URL=url, DB_POOL_TIMEOUT="3", PORTAL_HEALTH_PROBE_WATCH_S="0"
        )
        with running(server):
            up = _readyz(base)
            assert up.status_code == 200, up.text
            pg.stop()
            down = _readyz(base)
            assert down.status_code == 503, down.text
            body = down.json()
            assert body["status"] == "unavailable"
            assert body["checks"]["database"].startswith("error: ")
            assert body["checks"]["redis"] == "ok"
            assert body["health"]["status"] == "down" and "database" in body["health"]["parts"]
            pg.start()
            wait_for(lambda: _readyz(base).status_code == 200, 60, "ready with PostgreSQL back")


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_it_fails_while_redis_is_stopped_and_says_the_portal_is_down():
    with PrivateRedis() as redis:
        server, base = start_server(
            REDIS_URL=redis.url, PORTAL_HEARTBEAT_STALE_S="3600", PORTAL_HEALTH_PROBE_WATCH_S="0"
        )
        with running(server):
            assert _readyz(base).status_code == 200
            redis.stop()
            down = _readyz(base)
            assert down.status_code == 503, down.text
            assert down.json()["health"] == {"status": "down", "parts": ["redis"]}
            redis.start()
            wait_for(lambda: _readyz(base).status_code == 200, 30, "ready with Redis back")
