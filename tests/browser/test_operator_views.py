"""In Chromium, against real agents on emulated trays: a GPU made sick shows on its tray's
page, on the Fleet's elevation and in the needs-attention list within a report interval;
trays on another driver are highlighted on the versions page; a maintenance window
scheduled on the maintenance page is on the calendar; the top bar and the request form."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from domains.inventory.models import Node
from testbed import factories
from testbed.emulator.tray import sicken_gpu
from testbed.trays import Tray, facts_of, trays_of
from tests.browser.conftest import IP_PREFIX, screenshot, wait_live

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

INTERVAL = "2"  # seconds between two GPU-health reports of each agent
WITHIN = 15_000  # ms: a report interval, the live refresh and a loaded machine's slack


def test_a_sick_gpu_shows_on_its_tray_the_elevation_and_the_attention_list(
    login, operator, portal_url, tmp_path
):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    node = Node.objects.get(rack=rack, slot=1)
    args = ("--gpu-health-interval", INTERVAL)
    with trays_of(portal_url, [node], tmp_path, args=args) as (tray,):
        session = login(operator)
        tray_page = session.page(f"/fabric/nodes/{node.hostname}/")
        wait_live(tray_page)
        expect(tray_page.locator('#gpu-health tr[data-gpu="1"]')).to_contain_text(
            "°C", timeout=WITHIN
        )  # the healthy readings have come in
        fleet = session.context.new_page()
        fleet.goto("/fabric/")
        wait_live(fleet)
        attention = session.context.new_page()
        attention.goto("/fabric/attention/")
        wait_live(attention)

        sicken_gpu(tray.root, 1, xids=(79,), nvlink_errors_per_s=50.0, temperature_c=93)

        row = tray_page.locator('#gpu-health tr[data-gpu="1"]')
        expect(row).to_have_class("attention", timeout=WITHIN)
        expect(row.locator('[data-alert="xid"]')).to_have_text("XID 79")
        expect(row).to_contain_text("93 °C")
        drawn = fleet.locator(f'svg.el g.t[data-hostname="{node.hostname}"]')
        expect(drawn).to_have_attribute("data-gpu-alerts", re.compile(r"\bxid\b"), timeout=WITHIN)
        expect(drawn.locator("rect.g-alert")).to_have_count(1)
        listed = attention.locator(f'tr[data-kind="gpu"][data-subject="{node.hostname}"]')
        expect(listed).to_contain_text("GPU1 XID 79", timeout=WITHIN)
        expect(listed.locator('a[data-action="cordon"]')).to_be_visible()
        # Its NVLink errors keep rising: the next report says so too.
        expect(row.locator('[data-alert="nvlink"]')).to_be_visible(timeout=WITHIN)
        screenshot(tray_page, "tray-gpu-health")
        screenshot(fleet, "fleet-gpu-overlay")
        screenshot(attention, "needs-attention")


def test_a_tray_on_another_driver_is_highlighted_on_the_versions_page(
    login, operator, portal_url, tmp_path
):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    usual, odd = Node.objects.filter(rack=rack).order_by("slot")
    trays = [
        Tray(portal_url, facts_of(usual), root=tmp_path / usual.hostname),
        Tray(portal_url, replace(facts_of(odd), driver_version="575.57.08"), root=tmp_path / "o"),
    ]
    with trays[0], trays[1]:
        for tray in trays:
            tray.wait_ready()
        page = login(operator).page("/fabric/versions/")
        # Two trays on 580.82.07 would be usual; here it is one against one, so the page
        # names whichever it counts usual, and highlights the other.
        row = page.locator(f'tr[data-tray="{odd.hostname}"], tr[data-tray="{usual.hostname}"]')
        drifted = row.locator('td[data-component="driver"].drift')
        expect(drifted).to_have_count(1)
        expect(page.locator('#version-counts tr[data-component="driver"] td.drift')).to_be_visible()
        expect(page.locator("#mixed-cliques")).to_contain_text("more than one driver")
        screenshot(page, "versions-drift")


def test_a_window_scheduled_on_the_maintenance_page_is_on_the_calendar(login, operator, portal_url):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    page = login(operator).page("/fabric/maintenance/")
    start = (timezone.now() + timedelta(days=1)).replace(hour=2, minute=0, second=0)
    page.select_option("#id_scope", "rack")
    page.fill("#id_target", rack.name)
    page.fill("#id_starts_at", start.strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_ends_at", (start + timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_reason", "busbar inspection")
    page.click("#schedule-maintenance")
    expect(page.locator(".msg-success")).to_contain_text("Scheduled")
    page.click("#to-calendar")
    week = page.locator(f'#calendar tr[data-rack="{rack.name}"]')
    expect(week.locator("a.cal-entry")).to_contain_text("02:00 to 06:00 busbar inspection")
    page.click('a[href*="view=month"]')
    day = page.locator(f'td[data-day="{start:%Y-%m-%d}"] a.cal-entry')
    expect(day).to_contain_text("busbar inspection")
    expect(day).to_contain_text(f"({rack.name})")
    screenshot(page, "maintenance-calendar-month")


def test_the_top_bar_keeps_to_one_line_at_1440_px_for_an_admin(login, admin, ns_a, portal_url):
    page = login(admin).page("/fabric/")
    page.set_viewport_size({"width": 1440, "height": 900})
    tops = page.eval_on_selector_all(
        ".topbar nav > a, .topbar nav > details > summary",
        "items => items.map(i => Math.round(i.getBoundingClientRect().top))",
    )
    assert len(tops) >= 7 and len(set(tops)) == 1, tops  # every link on one line
    page.click("#nav-admin summary")
    expect(page.locator("#nav-admin a", has_text="Quotas")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#nav-admin a", has_text="Quotas")).to_be_hidden()


def test_zero_trays_turns_the_size_to_follow_the_workload(login, tenant_a, ns_a, portal_url):
    factories.make_racks("2", ip_prefix=IP_PREFIX)
    page = login(tenant_a).page("/ns/team-a/request/")
    page.fill("#id_name", "follow")
    page.fill("#id_num_nodes", "0")
    expect(page.locator('input[name="size"][value="workload"]')).to_be_checked()
    expect(page.locator("#id_num_nodes")).to_be_disabled()
    expect(page.locator("[data-preview]")).to_contain_text(re.compile("follows the workload", re.I))
