"""What a person asks for with a form shows that it is on its way: the part of the page that
will change is marked busy (dimmed, and aria-busy for screen readers) until the answer is in,
and refreshes the live feed sets off are nobody's wait."""

from __future__ import annotations

import pytest

from testbed import factories
from tests.browser.conftest import IP_PREFIX
from tests.support.lifecycle import request_domain

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Every aria-busy change anywhere in the page, in order, with the element's id.
WATCH = """() => {
  window.__busy = [];
  new MutationObserver((changes) => changes.forEach((c) => window.__busy.push(
    `${c.target.id}:${c.target.getAttribute('aria-busy')}`
  ))).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['aria-busy']});
}"""


def test_asking_for_other_manifests_marks_them_busy_until_they_come(login, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    domain = request_domain(ns_a, tenant_a, "wl", num_nodes=0)
    page = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    page.wait_for_load_state("networkidle")  # htmx is listening before the form is used
    page.evaluate(WATCH)
    page.fill("#id_replicas", "5")
    page.click("#manifests button[type=submit]")
    page.wait_for_selector("#manifest-deployment >> text=replicas: 5")
    assert page.evaluate("window.__busy")[0] == "manifests:true"
    assert page.locator("[aria-busy]").count() == 0  # the answer replaced the busy part


def test_the_request_preview_is_busy_while_it_checks_but_not_on_a_live_refresh(
    login, tenant_a, ns_a
):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    page = login(tenant_a).page("/ns/team-a/request/")
    page.wait_for_selector("[data-preview]")
    page.wait_for_load_state("networkidle")
    page.evaluate(WATCH)
    with page.expect_response("**/request/preview/"):  # 500 ms after a live message
        page.evaluate("document.body.dispatchEvent(new CustomEvent('live'))")
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__busy") == []
    page.fill("#id_name", "train")
    page.fill("#id_num_nodes", "2")
    page.wait_for_selector('[data-preview="ok"]')
    page.wait_for_load_state("networkidle")
    seen = page.evaluate("window.__busy")
    assert seen[0] == "preview:true" and seen[-1] == "preview:null"
    assert page.get_attribute("#preview", "aria-busy") is None
