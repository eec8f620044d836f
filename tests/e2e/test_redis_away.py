"""Redis away (docs/reliability.md): the API keeps answering, and work asked for while the
broker was down is done once it is back.

A private redis-server (cache, Channels layer and Celery broker of a real server, worker and
beat) is killed while a tenant uses the API with a bearer token: reads and writes answer as
usual (the sign-in rate limiter counts locally instead of failing), and a domain requested
during the outage is placed after Redis returns (its placement message was lost with Redis;
the reconcile loop places it).
"""

from __future__ import annotations

import httpx
import pytest

from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain, Phase
from domains.tenancy.tokens import token_create
from testbed import factories
from testbed.agents import wait_for
from testbed.processes import running, start_beat, start_server, start_worker
from testbed.services import PrivateRedis
from tests.e2e.conftest import IP_PREFIX

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# No agents here: the trays' seeded heartbeats must not go stale during the test.
QUIET = {"PORTAL_HEARTBEAT_STALE_S": "3600", "PORTAL_RECONCILE_SECONDS": "1"}


@pytest.fixture
def redis():
    with PrivateRedis() as private:
        yield private


def tenant_client(url: str) -> httpx.Client:
    ns = factories.make_namespace("outage", max_gpus=72, max_nodes=18, max_domains=8)
    user = factories.make_user("outage-tenant")
    factories.add_member(user, ns, "member")
    _, raw = token_create(actor=Actor.for_user(user), user=user, name="outage")
    return httpx.Client(
        base_url=f"{url}/api/v1/namespaces/outage",
        headers={"Authorization": f"Bearer {raw}"},
        timeout=30,
    )


def body(name: str, nodes: int = 2) -> dict:
    return {"metadata": {"name": name}, "spec": {"numNodes": nodes}}


def test_with_redis_stopped_the_api_answers_and_the_domain_is_placed_when_it_returns(redis):
    factories.make_racks("4", ip_prefix=IP_PREFIX)
    server, url = start_server(REDIS_URL=redis.url, **QUIET)
    worker = start_worker(REDIS_URL=redis.url, **QUIET)
    beat = start_beat(REDIS_URL=redis.url, **QUIET)
    with running(beat, worker, server), tenant_client(url) as api:
        # Redis up: the ordinary path (message → worker → placed).
        assert api.post("/computedomains/", json=body("before")).status_code == 201
        before = ComputeDomain.objects.get(name="before")
        wait_for(lambda: _phase(before) == Phase.FORMING, 30, "placed while Redis is up")

        redis.stop()
        statuses = []
        for _ in range(3):
            statuses.append(api.get("/computedomains/").status_code)
        listed = api.get("/computedomains/")
        assert listed.status_code == 200, listed.text
        assert "before" in {d["metadata"]["name"] for d in listed.json()["results"]}
        created = api.post("/computedomains/", json=body("during"))
        statuses.append(created.status_code)
        assert created.status_code == 201, created.text
        statuses.append(api.get("/computedomains/during/").status_code)
        # A wrong token is still refused (401), counted locally, not an error.
        wrong = httpx.get(
            f"{url}/api/v1/namespaces/outage/computedomains/",
            headers={"Authorization": "Bearer dpt_not-a-token"},
            timeout=30,
        )
        statuses.append(wrong.status_code)
        assert statuses == [200, 200, 200, 201, 200, 401], statuses
        during = ComputeDomain.objects.get(name="during")
        assert during.phase == Phase.ADMITTED  # the message went nowhere

        redis.start()
        wait_for(lambda: _phase(during) == Phase.FORMING, 60, "placed after Redis returned")
        assert api.get("/computedomains/during/").status_code == 200
        assert "unreachable" in server.log()  # the limiter said so, once
        assert server.log().count("rate limits: the shared cache is unreachable") == 1
    assert "Internal Server Error" not in server.log(), server.log()[-3000:]


def _phase(domain: ComputeDomain) -> str:
    domain.refresh_from_db()
    return domain.phase
