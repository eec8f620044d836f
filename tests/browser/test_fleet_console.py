"""The Fleet as an operator console, in Chromium: every slot of an NVL72 rack labelled,
a summary that counts every tray, maintenance drawn on the racks, the last day's trends
drawn from what the portal recorded, and filters in one toolbar line."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain
from domains.foresight.maintenance import maintenance_schedule
from domains.inventory.models import Node, PowerShelf, SwitchTray
from domains.inventory.services import node_cordon, node_drain, node_mark_down
from testbed import factories
from tests.browser.conftest import IP_PREFIX, screenshot, wait_live
from tests.support.lifecycle import form, request_domain

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_every_slot_of_an_nvl72_rack_is_labelled(login, operator, tenant_a, ns_a):
    first, second = factories.make_racks("18", "9,9", ip_prefix=IP_PREFIX)
    form(
        request_domain(
            ns_a, tenant_a, "train", placement_constraint="rack", placement_target=first.name
        )
    )
    # The second rack's parts were never inventoried: drawn from the rack model's layout.
    SwitchTray.objects.filter(rack=second).delete()
    PowerShelf.objects.filter(rack=second).delete()
    SwitchTray.objects.filter(rack=first, slot=4).update(state="down")
    page = login(operator).page("/fabric/")
    for rack in (first, second):
        svg = page.locator(f'svg.el[data-rack="{rack.name}"]')
        slots = svg.locator("g.t text.sl").all_text_contents()
        assert slots == [f"{n:02d}" for n in range(1, 19)]  # 1-10 above the switches, 11-18
        switches = svg.locator("g.p-switch text.pw:not(.ps)").all_text_contents()
        assert switches == [f"NVLink switch tray {n}" for n in range(1, 10)]
        shelves = svg.locator("g.p-power text.pw:not(.ps)").all_text_contents()
        assert [s.split(" · ")[0] for s in shelves] == [f"Power shelf {n}" for n in range(1, 9)]
        words = svg.locator("g.t text.w").all_text_contents()
        assert len(words) == 18 and all(words)  # every tray says what it is doing
    held = page.locator('svg.el[data-rack="gb-r01"] g.t.k-in-use text.w').all_text_contents()
    assert held == ["team-a/train", "team-a/train"]
    assert page.locator('svg.el[data-rack="gb-r01"] rect.do').count() == 1  # one outline
    missing = page.locator('svg.el[data-rack="gb-r02"] g.p text.ps').all_text_contents()
    assert set(missing) == {"not inventoried"} and len(missing) == 17
    states = page.locator('svg.el[data-rack="gb-r01"] g.p text.ps').all_text_contents()
    assert states == ["OK"] * 7 + ["down"] + ["OK"] * 9  # 4 shelves, then switch tray 4
    side = page.locator('.el-card[data-rack="gb-r01"] .el-side')
    assert "1 part down: gb-r01-s04" in side.inner_text()
    assert "team-a/train · 2 trays" in side.locator(".doms").inner_text()
    # The switch trays sit between trays 10 and 11, as in the rack.
    rows = page.locator('svg.el[data-rack="gb-r01"] > *').evaluate_all(
        "els => els.map(e => e.querySelector('text.sl') ? e.querySelector('text.sl').textContent"
        " : '').filter(Boolean)"
    )
    assert rows[:5] == ["P1", "P2", "P3", "P4", "01"]
    assert rows[13:23] == ["10", "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9"]
    assert rows[23] == "11" and rows[-5:] == ["18", "P5", "P6", "P7", "P8"]
    page.set_viewport_size({"width": 1440, "height": 900})
    screenshot(page, "fleet-2-racks", full_page=False)


def test_the_summary_counts_every_tray_including_those_not_ready(login, operator):
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    actor = Actor.for_user(operator)
    node_cordon(actor=actor, node=rack.nodes.get(slot=5))
    node_drain(actor=actor, node=rack.nodes.get(slot=6))
    node_mark_down(actor=actor, node=rack.nodes.get(slot=7), reason="PSU fault")
    for node in Node.objects.filter(rack=rack, slot__in=(3, 4)):
        factories.stale_heartbeat(node)
    page = login(operator).page("/fabric/")
    counts = {
        key: page.inner_text(f'[data-band="trays-{key}"]')
        for key in ("free", "used", "cordoned", "draining", "down", "not-ready", "total")
    }
    assert counts == {
        "free": "13",
        "used": "0",
        "cordoned": "1",
        "draining": "1",
        "down": "1",
        "not-ready": "2",
        "total": "18",
    }
    assert page.inner_text('[data-band="gpus-not-ready"]') == "8"
    silent = page.locator('svg.el g.t[data-hostname="gb-r01-t03"]')
    assert "k-silent" in (silent.get_attribute("class") or "")  # its own state, not "down"
    assert silent.locator("text.w").text_content() == "agent silent"
    assert page.locator('svg.el g.t[data-hostname="gb-r01-t06"] text.w').text_content() == (
        "draining"
    )


def test_a_maintenance_window_is_drawn_on_the_trays_it_covers(login, operator):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    now = timezone.now()
    maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=now - timedelta(minutes=5),
        ends_at=now + timedelta(hours=2),
        reason="swap NVLink cables",
        trays=["gb-r01-t02", "gb-r01-t03", "gb-r01-t04"],
    )
    page = login(operator).page("/fabric/")
    band = page.locator('svg.el[data-rack="gb-r01"] rect.mb')
    assert band.count() == 1  # one band over three trays one under another
    title = band.locator("title").text_content() or ""
    assert title.startswith("Maintenance under way: swap NVLink cables")
    box, first, last = (
        band.bounding_box(),
        page.locator('g.t[data-hostname="gb-r01-t02"] rect.tf').bounding_box(),
        page.locator('g.t[data-hostname="gb-r01-t04"] rect.tf').bounding_box(),
    )
    assert box and first and last
    assert (
        abs(box["y"] - first["y"]) < 1
        and abs(box["y"] + box["height"] - last["y"] - last["height"]) < 1
    )
    assert page.locator('g.t[data-hostname="gb-r01-t03"] text.w').text_content() == (
        "free · maint."
    )
    assert "swap NVLink cables" in page.inner_text('[data-rack="gb-r01"] .windows')


def test_the_trends_are_drawn_from_the_recorded_history(login, operator, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    # It was asked for three hours ago and was Ready 42 s later (what the portal recorded).
    asked = timezone.now() - timedelta(hours=3)
    ComputeDomain.objects.filter(pk=domain.pk).update(
        created_at=asked, placed_at=asked, ready_at=asked + timedelta(seconds=42)
    )
    domain.members.update(assigned_at=asked)
    request_domain(ns_a, tenant_a, "waits", num_nodes=9)  # awaits approval: queued
    page = login(operator).page("/fabric/")
    gpus = page.locator('[data-trend="gpus-used"]')
    assert gpus.locator("figcaption b").text_content() == "8"
    assert gpus.locator("svg polyline").count() == 1
    points = (gpus.locator("svg polyline").get_attribute("points") or "").split()
    heights = [float(p.split(",")[1]) for p in points]
    assert heights[0] > heights[-1]  # nothing held a day ago, 8 GPUs for the last 3 hours
    assert page.locator('[data-trend="queue-depth"] figcaption b').text_content() == "1"
    p95 = page.locator('[data-trend="formation-p95"]')
    assert p95.locator("figcaption b").text_content() == "42 s"
    label = p95.locator("svg").get_attribute("aria-label") or ""
    assert label == "Formation p95 (placed → Ready) over the last 24 h: now 42 s, peak 42 s"


def test_the_toolbar_filters_the_racks_in_one_line(login, operator, tenant_a, ns_a):
    racks = factories.make_racks(*(["18"] * 14), ip_prefix=IP_PREFIX)
    form(
        request_domain(
            ns_a, tenant_a, "train", placement_constraint="rack", placement_target=racks[3].name
        )
    )
    node_mark_down(actor=Actor.for_user(operator), node=racks[9].nodes.get(slot=2))
    page = login(operator).page("/fabric/")
    toolbar = page.locator("#fleet-filters")
    box = toolbar.bounding_box()
    assert box is not None and box["height"] < 60  # one line at 1400 px
    assert page.locator(".el-card").count() == 12  # a page of elevations
    assert page.locator("#heatmap a.hm").count() == 14
    page.select_option("#id_state", "down")  # applies at once
    page.wait_for_url("**state=down**")
    assert page.locator(".el-card").count() == 1
    assert page.locator(".el-card h3 a").text_content() == racks[9].name
    assert page.locator("svg.el g.t:not(.dim)").count() == 1
    assert page.locator("svg.el g.t.dim").count() == 17
    page.select_option("#id_tenant", "team-a")
    page.wait_for_url("**tenant=team-a**")
    assert page.locator("#fleet-matches").count() == 1
    assert page.locator(".el-card").count() == 0  # down and team-a's: no tray is both
    page.select_option("#id_state", "")
    page.wait_for_url("**tenant=team-a**")
    page.wait_for_selector("#fleet-matches >> text=2 matching trays in 1 rack")
    assert page.locator(".el-card h3 a").all_text_contents() == [racks[3].name]
    held = page.locator("svg.el g.t:not(.dim) text.w").all_text_contents()
    assert held == ["team-a/train", "team-a/train"]


def test_the_console_follows_a_cordon_live_without_a_reload(login, operator):
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    page = login(operator).page("/fabric/")
    wait_live(page)
    page.evaluate("window.__notReloaded = true")
    assert page.inner_text('[data-band="trays-cordoned"]') == "0"
    node_cordon(actor=Actor.for_user(operator), node=rack.nodes.get(slot=9), reason="fan")
    page.wait_for_selector('svg.el g.t.k-cordoned[data-hostname="gb-r01-t09"]')
    assert page.inner_text('[data-band="trays-cordoned"]') == "1"
    assert page.evaluate("window.__notReloaded") is True
