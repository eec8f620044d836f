"""A tray that is down is drawn and told as down on every page that shows it, and trays
nobody flagged but placement cannot use are counted, not dropped, in the fleet's summary."""

from __future__ import annotations

import pytest

from domains.agents.heartbeats import agent_report
from domains.audit.events import Actor
from domains.inventory.models import Node
from domains.inventory.services import node_mark_down
from testbed import factories
from tests.browser.conftest import IP_PREFIX, screenshot
from tests.support.lifecycle import form, ready_report, request_domain

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def degraded(operator, tenant_a, ns_a):
    """team-a/train on two trays, the second marked down by an operator: Degraded."""
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    dead = domain.members.order_by("index").last().node
    agent_report(node=dead, report=ready_report(domain))  # its last heartbeat: all well
    node_mark_down(actor=Actor.for_user(operator), node=dead, reason="PSU fault")
    return domain, dead


def test_the_tenants_drawing_and_formation_row_show_the_dead_tray_as_down(
    login, tenant_a, degraded
):
    domain, dead = degraded
    page = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    page.wait_for_selector('#domain-phase[data-phase="Degraded"]')
    tray = page.locator(f'#where-h ~ .rack-row g.tray[data-hostname="{dead.hostname}"]')
    assert tray.get_attribute("data-kind") == "down"
    assert tray.locator(".state-flag").get_attribute("fill") == "url(#el-down)"
    word = tray.locator("text.word").text_content() or ""
    assert word.startswith("▶ down") and "lands here" not in word
    alive = page.locator("#where-h ~ .rack-row g.tray.highlight text.word").all_text_contents()
    assert "▶ train" in alive and not any("lands here" in w for w in alive)
    row = page.locator("#timeline tr").filter(has_text=dead.hostname)
    assert row.locator("td.daemon").inner_text() == "unknown: tray down"
    screenshot(page, "tenant-domain-tray-down")


def test_the_tray_page_says_the_daemon_is_unknown_and_prints_no_template_comment(
    login, operator, degraded
):
    _, dead = degraded
    page = login(operator).page(f"/fabric/nodes/{dead.hostname}/")
    assert page.inner_text("#node-state") == "Down"
    assert page.inner_text("#node-daemon").startswith("unknown: tray down")
    assert "last reported READY" in page.inner_text("#node-daemon")
    assert "before the tray was marked down" in page.inner_text("#node-agent-says")
    body = page.inner_text("body")
    assert "{#" not in body and "#}" not in body
    page.goto(f"/fabric/nodes/{dead.hostname}/cordon/")  # a confirmation with a blast radius
    assert "{#" not in page.inner_text("body")
    screenshot(page, "operator-tray-down")


def test_the_rack_page_counts_the_down_tray_unavailable_and_its_daemon_unknown(
    login, operator, degraded
):
    _, dead = degraded
    page = login(operator).page("/fabric/racks/gb-r01/")
    cells = page.locator("table:has(th:text('Unavailable')) tbody tr").first.locator("td")
    assert cells.nth(2).inner_text() == "1"  # in use: the live tray only
    assert cells.nth(3).inner_text() == "1"  # unavailable: the dead one
    row = page.locator(f'tr[data-hostname="{dead.hostname}"]')
    assert row.locator("td.daemon").inner_text() == "unknown: tray down"


def test_the_fleet_summary_counts_trays_with_no_heartbeat_as_not_ready(login, operator):
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    for node in Node.objects.filter(rack=rack, slot__in=(3, 4)):
        factories.stale_heartbeat(node)
    page = login(operator).page("/fabric/")
    assert page.inner_text('[data-band="trays-not-ready"]') == "2"
    assert page.inner_text('[data-band="gpus-not-ready"]') == "8"
    assert page.inner_text('[data-band="trays-free"]') == "16"
    assert page.inner_text('[data-band="not-ready"]') == "2"


def test_the_tenant_is_told_what_a_down_tray_means_and_what_to_do(login, tenant_a, degraded):
    domain, dead = degraded
    page = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    incident = page.locator("#domain-incident")
    assert incident.get_attribute("role") == "alert"
    text = incident.inner_text()
    assert f"Tray {dead.hostname} is down" in text
    assert 'declared it dead ("PSU fault")' in text
    assert "1 other tray of it is still up but cannot reach it over NVLink" in text
    assert "release this domain and request a new one" in text
    page.click("#domain-incident a")  # the same request, ready to send under a new name
    assert page.input_value("#id_num_nodes") == "2"
