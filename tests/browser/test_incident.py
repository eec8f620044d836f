"""An operator drains and marks down a tray of a running domain through the forms: an
incident opens, linked from the tray page, the Fleet and the audit log; its page lists the
domains and tenants hit and takes a note, which the form says tenants read; the tenant reads
it on her domain's page, another tenant reads nothing. Every page that draws or lists the
dead tray draws it down, in the one colour system (state as fill, domain as outline)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from domains.computedomains.models import Incident, ReplacePolicy
from testbed import factories
from tests.browser.conftest import IP_PREFIX, screenshot
from tests.support.lifecycle import form, request_domain

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DOWN_FILL = "rgb(254, 226, 226)"  # .st-down
USED_FILL = "rgb(191, 219, 254)"  # .st-used


def act(page, hostname: str, action: str, reason: str) -> None:
    """An operator's tray action through its confirmation form."""
    page.goto(f"/fabric/nodes/{hostname}/{action}/")
    page.fill("#id_reason", reason)
    page.click("#confirm-action")
    page.wait_for_url(f"**/fabric/nodes/{hostname}/")


@pytest.fixture
def incident(login, operator, tenant_a, ns_a):
    """team-a/train on two trays; the operator drains the second and marks it down. Its
    trays are replaced by an operator (replace: manual): the dead tray stays the domain's,
    as every page then draws it. (A domain that gets a free tray in its place at once:
    tests/web/test_tray_truth.py.)"""
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    domain = form(
        request_domain(ns_a, tenant_a, "train", num_nodes=2, replace_policy=ReplacePolicy.MANUAL)
    )
    dead = domain.members.order_by("index").last().node
    ops = login(operator).page("/fabric/")
    act(ops, dead.hostname, "drain", "fans loud")
    act(ops, dead.hostname, "mark_down", "PSU fault")
    return ops, domain, dead


def fill_of(page, selector: str) -> str:
    return page.eval_on_selector(selector, "e => getComputedStyle(e).fill")


def test_an_incident_is_linked_from_the_tray_the_fleet_and_the_audit_log(login, admin, incident):
    ops, _, dead = incident
    opened = Incident.objects.get()
    link = ops.locator("#node-incident")
    assert link.inner_text() == f"incident #{opened.pk}, open"
    link.click()
    ops.wait_for_selector("#incident-facts[data-open='yes']")
    assert "PSU fault" in ops.inner_text("#incident-facts")
    ops.goto("/fabric/")
    assert ops.inner_text('[data-band="incidents"]') == "1"
    ops.click("#fleet-incidents")
    row = ops.locator(f'#incidents tr[data-incident="{opened.pk}"]')
    assert row.get_attribute("data-open") == "yes"
    assert "team-a/train" in row.inner_text() and dead.hostname in row.inner_text()
    audit = login(admin).page("/manage/audit/?verb=incident")
    audit.click(f'a[data-incident="{opened.pk}"] >> nth=0')
    audit.wait_for_url(f"**/fabric/incidents/{opened.pk}/")


def test_the_operators_note_reaches_the_tenant_and_no_other_tenant(
    login, incident, tenant_a, tenant_b, ns_b
):
    ops, domain, _ = incident
    ops.click("#node-incident")
    assert "team-a" in ops.inner_text("#incident-tenants")
    assert ops.locator("#incident-domains tr[data-domain='train']").count() == 1
    note_form = ops.inner_text("#incident-note")
    assert "Tenants read this." in note_form and "word for word" in note_form
    ops.click("#send-note")  # empty: refused, naming the field
    assert "required" in ops.inner_text("#id_note-errors")
    ops.fill("#id_note", "The PSU is being replaced; the tray is back by 14:00 UTC.")
    ops.click("#send-note")
    ops.wait_for_selector("#incident-notes li")
    assert "Note sent to the tenants of 1 domain." in ops.inner_text(".messages")
    assert ops.locator("#incident-timeline tr[data-verb='incident.note']").count() == 1
    screenshot(ops, "operator-incident")

    mine = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    notes = mine.inner_text("#domain-incident #incident-notes")
    assert "The PSU is being replaced; the tray is back by 14:00 UTC." in notes
    assert "Operator's note on tray" in mine.inner_text("#events-h ~ .table-wrap")
    screenshot(mine, "tenant-domain-incident-note", full_page=False)

    other = login(tenant_b)
    page = other.page(f"/ns/team-a/domains/{domain.uid}/")
    assert "PSU is being replaced" not in page.content()
    page = other.page("/fabric/incidents/")
    assert "PSU is being replaced" not in page.content() and "team-a" not in page.content()
    page = other.page("/ns/team-b/")
    assert "PSU is being replaced" not in page.content()


def test_every_page_that_draws_or_lists_the_dead_tray_draws_it_down(login, tenant_a, incident):
    ops, domain, dead = incident
    host = dead.hostname
    # The tenant's drawing: filled as down, the down swatch defined on the page, its word.
    mine = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    tray = f'#where-h ~ .rack-row g.tray[data-hostname="{host}"]'
    assert mine.get_attribute(tray, "data-kind") == "down"
    assert fill_of(mine, f"{tray} .tray-bg") == DOWN_FILL
    assert mine.get_attribute(f"{tray} .state-flag", "fill") == "url(#el-down)"
    assert mine.locator("pattern#el-down").count() == 1
    assert (mine.locator(f"{tray} text.word").text_content() or "").startswith("▶ down")
    row = mine.locator("#timeline tr").filter(has_text=host)
    assert row.locator("td.daemon").inner_text() == "unknown: tray down"
    # The peer matrix: the dead tray's row is not its last report (all connected).
    peers = mine.locator("#peer-matrix tbody tr").filter(has_text=host).locator("td")
    assert peers.all_inner_texts() == ["-", "down"] or peers.all_inner_texts() == ["down", "-"]
    # The Fleet's elevation, the rack page and the clique page.
    ops.goto("/fabric/")
    assert ops.get_attribute(f'svg.el g.t[data-hostname="{host}"]', "class").startswith("t k-down")
    ops.goto("/fabric/racks/gb-r01/")
    assert ops.get_attribute(f'svg.el g.t[data-hostname="{host}"]', "data-state") == "down"
    assert ops.locator(f'tr[data-hostname="{host}"] td.daemon').inner_text() == (
        "unknown: tray down"
    )
    ops.goto(f"/fabric/cliques/{dead.clique.name}/")
    unavailable = ops.locator("#clique-band div").filter(has_text="unavailable").locator("dd")
    assert unavailable.inner_text() == "1"
    assert ops.locator(f'tr[data-hostname="{host}"] td.daemon').inner_text() == (
        "unknown: tray down"
    )
    # The tray page.
    ops.goto(f"/fabric/nodes/{host}/")
    assert ops.inner_text("#node-state") == "Down"
    assert ops.inner_text("#node-daemon").startswith("unknown: tray down")


def test_the_tenants_drawing_fills_by_state_and_outlines_the_domain(login, tenant_a, incident):
    _, domain, dead = incident
    page = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    live = f'#where-h ~ .rack-row g.tray.highlight:not([data-hostname="{dead.hostname}"])'
    assert page.get_attribute(live, "data-kind") == "in use"
    assert fill_of(page, f"{live} .tray-bg") == USED_FILL  # the state, not a domain pastel
    assert page.locator(live).count() == 1
    outlines = page.locator("#where-h ~ .rack-row svg.rack rect.do")
    assert outlines.count() >= 1 and outlines.first.get_attribute("stroke")
    free = page.locator('#where-h ~ .rack-row g.tray[data-kind="free"] .tray-bg').first
    assert free.evaluate("e => getComputedStyle(e).fill") == "rgb(220, 245, 227)"
    legend = page.inner_text("#where-h ~ .el-legend")
    for word in ("free", "in use", "cordoned", "draining", "down", "domain (outline + name)"):
        assert word in legend
    screenshot(page, "tenant-domain-colours")


def test_the_request_preview_marks_where_it_lands_without_a_domain_colour(login, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    page = login(tenant_a).page("/ns/team-a/request/")
    page.fill("#id_name", "next")
    page.fill("#id_num_nodes", "3")
    landing = page.locator("#preview svg.rack g.tray.highlight")
    expect(landing).to_have_count(3)
    for text in landing.locator("text.word").all_text_contents():
        assert text == "▶ lands here"
    assert page.locator("#preview svg.rack rect.landing").count() >= 1
    first = "#preview svg.rack g.tray.highlight .tray-bg"
    assert fill_of(page, first) == "rgb(220, 245, 227)"  # free, as on the Fleet
    assert "where it would land" in page.inner_text("#preview .el-legend")
