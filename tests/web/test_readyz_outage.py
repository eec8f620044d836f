"""/readyz says whether this web process can do its work: it answers 503 while its broker
(Redis) is away and 200 again once it is back. A real server against a private redis-server
that the test kills as a crash would."""

from __future__ import annotations

import httpx
import pytest

from testbed.agents import wait_for
from testbed.processes import running, start_server
from testbed.services import PrivateRedis

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _readyz(url: str) -> httpx.Response:
    return httpx.get(f"{url}/readyz", timeout=30)


def test_readyz_fails_while_redis_is_stopped_and_recovers_when_it_returns():
    with PrivateRedis() as redis:
        server, url = start_server(REDIS_URL=redis.url, PORTAL_HEARTBEAT_STALE_S="3600")
        with running(server):
            up = _readyz(url)
            assert up.status_code == 200, up.text
            assert up.json()["checks"] == {"database": "ok", "redis": "ok"}

            redis.stop()
            down = _readyz(url)
            assert down.status_code == 503, down.text
            assert down.json()["status"] == "unavailable"
            assert down.json()["checks"]["database"] == "ok"
            assert down.json()["checks"]["redis"].startswith("error: ")

            redis.start()
            wait_for(lambda: _readyz(url).status_code == 200, 30, "ready again with Redis back")
