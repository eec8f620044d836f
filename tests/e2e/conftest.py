"""End-to-end fixtures: a real ASGI server, a real Celery worker, real agent processes.

The server and worker are started once per module (they only need the test database to
exist; each test's rows are flushed by `transaction=True` as usual). Trays use loopback IPs
127.12.<rack>.<slot> (this suite's range, moved by TEST_TRAY_IP_BASE), each with its own
emulated IMEX daemon.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import LIVE_PHASES, ComputeDomain
from domains.tenancy.tokens import token_create
from testbed import factories
from testbed.processes import running, start_server, start_worker

METRICS_TOKEN = "e2e-metrics-token"  # what a Prometheus scraping the server presents
IP_PREFIX = factories.tray_ip_prefix(12)  # 127.12 unless TEST_TRAY_IP_BASE moves it


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker) -> Iterator[str]:
    """URL of a real server with a real worker behind it."""
    server, url = start_server(PORTAL_METRICS_TOKEN=METRICS_TOKEN)
    worker = start_worker(concurrency=4)
    with running(worker, server):
        yield url


@pytest.fixture
def tenant_api(transactional_db, portal) -> Iterator[httpx.Client]:
    """A namespace member's API client (bearer token) on the real server."""
    ns = factories.make_namespace("e2e")
    user = factories.make_user("e2e-tenant")
    factories.add_member(user, ns, "member")
    _, raw = token_create(actor=Actor.for_user(user), user=user, name="e2e")
    client = httpx.Client(
        base_url=f"{portal}/api/v1/namespaces/e2e",
        headers={"Authorization": f"Bearer {raw}"},
        timeout=30,
    )
    yield client
    client.close()


def request_domain(
    api: httpx.Client, name: str, nodes: int, *, request_id: str = "", **spec: Any
) -> ComputeDomain:
    body = {"metadata": {"name": name}, "spec": {"numNodes": nodes, **spec}}
    headers = {"X-Request-ID": request_id} if request_id else {}
    resp = api.post("/computedomains/", json=body, headers=headers)
    assert resp.status_code == 201, resp.text
    return ComputeDomain.objects.get(namespace__name="e2e", name=name, phase__in=LIVE_PHASES)


def release_domain(api: httpx.Client, name: str) -> None:
    resp = api.delete(f"/computedomains/{name}/")
    assert resp.status_code in (200, 202), resp.text


def phase_of(domain: ComputeDomain) -> str:
    domain.refresh_from_db()
    return domain.phase


def verbs(domain: ComputeDomain) -> list[str]:
    return list(Event.objects.filter(domain=domain).order_by("id").values_list("verb", flat=True))
