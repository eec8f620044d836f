"""A tray dies under a running domain, for real: its agent and its IMEX daemon stopped by the
demo's tray control, the rest of the world (server, worker, beat, the other trays) untouched.
Within the heartbeat grace the portal says the tray's agent is silent (not ready, still held);
past the failover grace the domain gets a free tray of its clique in its place and is Ready
again; the dead tray, back, tears down what it held and is free."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import DomainMember, Phase
from domains.inventory.models import Node
from domains.tenancy.tokens import token_create
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from testbed.processes import running, start_beat, start_server, start_worker
from tests.e2e.conftest import phase_of, request_domain

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(35)  # this module's loopback range
# Short on purpose: what is measured here is what happens, not how long it takes.
TIMING = {
    "PORTAL_HEARTBEAT_INTERVAL_S": "1",
    "PORTAL_HEARTBEAT_STALE_S": "3",
    "PORTAL_FAILOVER_GRACE_S": "6",
    "PORTAL_RECONCILE_SECONDS": "1",
    "PORTAL_REAP_SECONDS": "1",
}


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker) -> Iterator[str]:
    """The real server, worker and beat, with short heartbeat and failover graces."""
    server, url = start_server(**TIMING)
    worker = start_worker(concurrency=4, **TIMING)
    beat = start_beat(**TIMING)
    with running(beat, worker, server):
        yield url


@pytest.fixture
def operator_api(transactional_db, portal) -> Iterator[httpx.Client]:
    user = factories.make_user("e2e-operator", staff=True)
    _, raw = token_create(actor=Actor.for_user(user), user=user, name="e2e")
    with httpx.Client(
        base_url=f"{portal}/api/v1", headers={"Authorization": f"Bearer {raw}"}, timeout=30
    ) as client:
        yield client


def active_trays(domain) -> set[str]:
    return set(
        DomainMember.objects.filter(domain=domain, active=True).values_list(
            "node__hostname", flat=True
        )
    )


def test_a_dead_trays_agent_shows_silent_then_its_domain_gets_a_free_tray_in_its_place(
    portal, tenant_api, operator_api
):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    trays = list(Node.objects.filter(rack=rack).order_by("slot"))
    with AgentFleet(portal, trays, poll_interval=1, heartbeat_interval=1) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "survives", 3)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        first = active_trays(domain)
        (spare,) = {t.hostname for t in trays} - first
        victim = sorted(first)[1]

        fleet.control(victim, "kill")  # the tray dies: its agent and its daemon

        def tray(host: str) -> dict:
            return operator_api.get(f"/nodes/{host}/").json()

        seen = wait_for(lambda: (t := tray(victim))["agent"] == "silent" and t, 15, "silent")
        assert seen["status"] == "stale" and seen["inUse"] is True  # not ready, still held
        fleet_page = operator_api.get("/nodes/?page_size=50").json()["results"]
        assert [n["hostname"] for n in fleet_page if n["status"] == "stale"] == [victim]

        wait_for(lambda: victim not in active_trays(domain), 30, f"{victim} replaced")
        assert active_trays(domain) == (first - {victim}) | {spare}
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "Ready on the new tray")
        said = Event.objects.get(domain=domain, verb="domain.member_replaced").message
        assert said.startswith(f"{victim} replaced by {spare}")
        assert "has not reported since" in said

        fleet.control(victim, "revive")  # it comes back: it no longer serves the domain
        wait_for(lambda: fleet.leftovers(victim) == [], 30, f"{victim} torn down")
        wait_for(lambda: tray(victim)["status"] == "free", 30, f"{victim} free again")
        assert phase_of(domain) == Phase.READY
