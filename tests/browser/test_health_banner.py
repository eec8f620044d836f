"""A tray's agent that cannot fetch its desired state because the portal fails it (a real
server error: a column the statement names is gone, as after a migration that did not run)
is named in a banner on the Fleet page, its page says what its agent says, /readyz stays
ready, and operators are told once, then told again when it recovers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest
from django.db import connection
from playwright.sync_api import expect

from domains.computedomains.models import ChannelAllocation
from domains.inventory.models import Node
from domains.notifications.models import Notification
from domains.notifications.services import subscription_create
from testbed import factories
from testbed.agents import wait_for
from testbed.processes import running, start_server, start_worker
from testbed.trays import trays_of
from tests.browser.conftest import IP_PREFIX, screenshot, wait_live
from tests.browser.test_accessibility import AXE, FAILING, RUN_AXE

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Short clocks: every probe reads the condition, a change is told once it lasted 1 s, and a
# failure stops counting 4 s after the agent's last one.
QUICK = {
    "PORTAL_HEALTH_PROBE_WATCH_S": "0",
    "PORTAL_HEALTH_SETTLE_S": "1",
    "PORTAL_HEALTH_GAP_S": "0",
    "PORTAL_AGENT_FAILURE_CURRENT_S": "4",
}


@pytest.fixture(scope="module")
def portal_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    server, url = start_server(**QUICK)
    worker = start_worker(concurrency=2, **QUICK)
    with running(worker, server):
        yield url


@contextlib.contextmanager
def desired_state_broken() -> Iterator[None]:
    """The statement that reads a tray's desired state names a column that is gone: every
    read of it fails on the server (500), nothing else the pages read does."""
    table = ChannelAllocation._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{table}" RENAME COLUMN "channel" TO "channel_gone"')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{table}" RENAME COLUMN "channel_gone" TO "channel"')


def readyz(url: str) -> httpx.Response:
    return httpx.get(f"{url}/readyz", timeout=30)


def serious_axe_findings(page) -> list[str]:
    """axe-core's serious and critical findings on the page (the banners included)."""
    page.wait_for_load_state("networkidle")
    return [f"{v['id']}: {v['help']}" for v in page.evaluate(RUN_AXE) if v["impact"] in FAILING]


def health_notices(user) -> list[str]:
    found = Notification.objects.filter(subscription__user=user, kind="portal.health")
    return list(found.order_by("created_at").values_list("title", flat=True))


def test_a_trays_agent_failed_by_the_portal_is_named_on_fleet_and_its_page_says_why(
    login, operator, portal_url, tmp_path
):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    node = Node.objects.get(rack=rack, slot=1)
    subscription_create(user=operator, channel="in_app", kinds=["portal.health"])
    with trays_of(portal_url, [node], tmp_path):
        session = login(operator)
        if not AXE.exists():
            pytest.fail(f"axe-core is not installed ({AXE} is missing)")
        session.context.add_init_script(path=str(AXE))
        fleet = session.page("/fabric/")
        wait_live(fleet)
        with desired_state_broken():
            # Named twice: the portal failed its calls, and its agent says so too.
            agents = fleet.locator('#health-banner [data-part="agents"]')
            expect(agents.locator(f'a[data-hostname="{node.hostname}"]')).to_have_count(2)
            expect(agents.first).to_contain_text("desired state")
            screenshot(fleet, "fleet-health-banner")
            assert serious_axe_findings(fleet) == []

            tray = session.page(f"/fabric/nodes/{node.hostname}/")
            expect(tray.locator("#agent-trouble-says")).to_contain_text("desired state: HTTP 500")
            expect(tray.locator("#agent-trouble-failure")).to_contain_text("ProgrammingError")
            screenshot(tray, "tray-agent-says")
            assert serious_axe_findings(tray) == []

            ready = readyz(portal_url)
            assert ready.status_code == 200, ready.text  # one tray's trouble fails no replica
            assert "agents" in ready.json()["health"]["parts"]
            wait_for(lambda: readyz(portal_url) and health_notices(operator), 30, "told")
            assert health_notices(operator) == ["Portal degraded: trays' agents cannot reach it"]

        expect(fleet.locator("#health-banner")).to_have_count(0, timeout=30_000)
        expect(tray.locator("#agent-trouble")).to_have_count(0, timeout=30_000)
        wait_for(lambda: readyz(portal_url) and len(health_notices(operator)) == 2, 30, "told")
        assert health_notices(operator)[1] == "Portal health recovered"
