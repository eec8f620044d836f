"""A domain over several racks in Chromium: the request form's live preview for 27 trays
over 2 racks names both racks and draws both; the domain's page (the tenant's and an
operator's) has a row per clique and draws every rack it runs in. axe stays clean on both."""

from __future__ import annotations

import pytest

from domains.computedomains.models import Phase
from testbed import factories
from tests.browser.conftest import IP_PREFIX, screenshot
from tests.browser.test_accessibility import AXE, FAILING, _axe, _readable
from tests.support.lifecycle import all_ready, request_and_place

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def big(tenant_a):
    """Two NVL72 racks (one 18-tray clique each) and a namespace with room for both."""
    racks = factories.make_racks("18", "18", ip_prefix=IP_PREFIX)
    namespace = factories.make_namespace("team-big")
    factories.add_member(tenant_a, namespace, "member")
    return namespace, sorted(r.name for r in racks)


def open_with_axe(session, path: str):
    """The page, with axe-core loaded before its own scripts (as the accessibility test)."""
    if not AXE.exists():
        pytest.fail(f"axe-core is not installed ({AXE} is missing)")
    page = session.context.new_page()
    page.add_init_script(path=str(AXE))
    page.goto(path)
    return page


def assert_axe_clean(page, path: str) -> None:
    found = [("page", path, v) for v in _axe(page) if v["impact"] in FAILING]
    assert not found, _readable(found)


def test_the_preview_of_27_trays_over_two_racks_names_and_draws_both(login, tenant_a, big):
    namespace, names = big
    path = f"/ns/{namespace.name}/request/"
    page = open_with_axe(login(tenant_a), path)
    page.fill("#id_name", "wide")
    page.fill("#id_num_nodes", "27")
    page.fill("#id_span_racks", "2")
    span = page.wait_for_selector('#preview #preview-span[data-racks="2"][data-cliques="2"]')
    assert f"2 racks ({', '.join(names)})" in span.inner_text()
    drawn = page.locator("#preview .rack-card").evaluate_all(
        "cards => cards.map(c => c.dataset.rack)"
    )
    assert sorted(drawn) == names
    screenshot(page, "tenant-request-span-racks")
    assert_axe_clean(page, path)
    page.check('input[name="size"][value="workload"]')  # nothing is placed: no span
    assert page.is_disabled("#id_span_racks") and page.is_disabled("#id_span_cliques")
    page.check('input[name="size"][value="trays"]')
    assert page.is_enabled("#id_span_racks")


@pytest.mark.parametrize("who", ["tenant", "operator"])
def test_a_domain_over_two_racks_shows_a_row_per_clique_and_both_racks(
    login, tenant_a, operator, big, who
):
    namespace, names = big
    domain = all_ready(request_and_place(namespace, tenant_a, name="wide", num_nodes=27))
    assert domain.phase == Phase.READY
    path = f"/ns/{namespace.name}/domains/{domain.uid}/"
    page = open_with_axe(login(tenant_a if who == "tenant" else operator), path)
    texts = page.locator("#cliques tbody tr").all_inner_texts()
    assert len(texts) == 2
    assert sum("18 of 18 ready" in t for t in texts) == 1
    assert sum("9 of 9 ready" in t for t in texts) == 1
    drawn = page.locator(".rack-row .rack-card").evaluate_all(
        "cards => cards.map(c => c.dataset.rack)"
    )
    assert sorted(drawn) == names
    screenshot(page, f"{who}-domain-over-two-racks")
    assert_axe_clean(page, path)


def test_the_fleet_outlines_a_domain_over_two_racks_on_both(login, tenant_a, operator, big):
    """From the domain's page, "Show on the fleet": both racks' tiles framed and marked,
    its 27 cells outlined; pointing at a cell and focusing a tile name the domain."""
    namespace, names = big
    domain = all_ready(request_and_place(namespace, tenant_a, name="wide", num_nodes=27))
    page = open_with_axe(login(operator), f"/ns/{namespace.name}/domains/{domain.uid}/")
    page.click("#show-on-fleet")
    page.wait_for_selector("#fleet-domain")
    # Parsed is not styled: the toolbar is measured once the page's stylesheets are in.
    page.wait_for_load_state("load")
    path = f"/fabric/?domain={domain.uid}"
    assert page.url.endswith(path)
    assert page.input_value("#id_domain") == "team-big/wide"  # asked by uid, shown by name
    box = page.locator("#fleet-filters").bounding_box()
    assert box is not None and box["height"] < 60  # the toolbar stays one line
    line = page.inner_text("#fleet-domain")
    assert f"spans 2 racks: {names[0]} " in line and "2 NVLink cliques, 27 trays" in line
    framed = page.locator("#heatmap a.hm.hm-in").evaluate_all("a => a.map(t => t.dataset.rack)")
    assert sorted(framed) == names
    assert page.locator("#heatmap i.m").count() == 27
    page.hover(f'#heatmap a.hm[data-rack="{names[1]}"] i.m >> nth=0')
    said = page.inner_text("#hm-info")
    assert said.startswith(f"{names[1]}, tray ") and "domain wide (namespace team-big)" in said
    page.focus(f'#heatmap a.hm[data-rack="{names[0]}"]')
    page.wait_for_function(
        "rack => document.getElementById('hm-info').textContent.startsWith(rack + ': ')",
        arg=names[0],
    )
    said = page.inner_text("#hm-info")
    assert said.startswith(f"{names[0]}: domain wide (namespace team-big), ") and "trays" in said
    screenshot(page, "operator-fleet-domain-over-two-racks")
    assert_axe_clean(page, path)
