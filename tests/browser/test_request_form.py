"""The request form: one size control (trays, GPUs or follow the workload) that disables
what does not apply, Trays 0 accepted as the API accepts it, and no error before typing."""

from __future__ import annotations

import pytest

from domains.computedomains.models import ComputeDomain, Phase
from testbed import factories
from testbed.agents import wait_for
from tests.browser.conftest import IP_PREFIX, screenshot, wait_live
from tests.support.lifecycle import all_ready

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_form_opens_without_an_error_and_accepts_zero_trays_as_follow_the_workload(
    login, tenant_a, ns_a
):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    page = login(tenant_a).page("/ns/team-a/request/")
    page.wait_for_selector('[data-preview="incomplete"]')
    assert page.locator('[data-preview="invalid"]').count() == 0
    assert "Name" in page.inner_text('[data-preview="incomplete"]')
    page.fill("#id_name", "zero")
    page.fill("#id_num_nodes", "0")
    page.wait_for_selector('#preview [data-preview="ok"]')
    page.click("#submit-request")
    page.wait_for_url("**/domains/*/")
    assert ComputeDomain.objects.get(name="zero").num_nodes == 0


def test_the_size_control_disables_the_fields_it_leaves_out(login, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    page = login(tenant_a).page("/ns/team-a/request/")
    page.fill("#id_name", "by-gpus")
    assert page.is_enabled("#id_num_nodes") and page.is_disabled("#id_gpus")
    page.check('input[name="size"][value="workload"]')
    assert page.is_disabled("#id_num_nodes") and page.is_disabled("#id_gpus")
    page.check('input[name="size"][value="gpus"]')
    assert page.is_disabled("#id_num_nodes") and page.is_enabled("#id_gpus")
    page.fill("#id_gpus", "16")  # an earlier answer (2 trays) may still land first: wait
    page.wait_for_selector('#preview [data-preview="ok"] >> text=placed on 4 trays')
    screenshot(page, "tenant-request-size-gpus")
    page.click("#submit-request")
    page.wait_for_url("**/domains/*/")
    assert ComputeDomain.objects.get(name="by-gpus").num_nodes == 4


def test_the_requested_note_goes_once_the_domain_has_moved_on(login, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    page = login(tenant_a).page("/ns/team-a/request/")
    page.fill("#id_name", "noted")
    page.fill("#id_num_nodes", "2")
    page.wait_for_selector('#preview [data-preview="ok"]')
    page.click("#submit-request")
    page.wait_for_url("**/domains/*/")
    assert page.inner_text(".messages .msg-success") == "Requested noted."
    wait_live(page)
    domain = ComputeDomain.objects.get(name="noted")
    placed = ComputeDomain.objects.filter(pk=domain.pk, phase=Phase.FORMING).exists
    wait_for(placed, 30, "placed by the worker")
    all_ready(domain)  # its agents report: Ready, drawn live
    page.wait_for_selector('#domain-phase[data-phase="Ready"]')
    page.wait_for_selector(".messages .msg-success", state="detached")


def test_quick_changes_log_no_aborted_preview_and_end_on_the_last_answer(login, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    page = login(tenant_a).page("/ns/team-a/request/")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.wait_for_selector("#preview [data-preview]")  # the first answer, on load
    page.fill("#id_name", "fast")
    page.fill("#id_num_nodes", "7")
    for mode in ("All", "Single") * 3:  # a change asks at once: the last answer still comes
        page.select_option("#id_allocation_mode", mode)
    page.wait_for_selector('#preview [data-preview="ok"] >> text=placed on 7 trays')
    page.wait_for_load_state("networkidle")  # every queued answer in: none outlives the test
    assert not [e for e in errors if "sendAbort" in e or "abort" in e.lower()], errors
