"""A request awaiting approval is reserved, not in use: the tenant sees both apart and can
still ask for what the quota has room for, as in the demo (team-a's quota and domains)."""

from __future__ import annotations

import pytest

from domains.computedomains.models import ComputeDomain, Phase
from domains.tenancy.models import Quota
from domains.tenancy.seed import DEMO_QUOTAS
from testbed import factories
from tests.browser.conftest import IP_PREFIX, screenshot
from tests.support.lifecycle import form, request_domain

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_with_a_big_request_awaiting_approval_a_tenant_still_requests_four_trays(
    login, tenant_a, ns_a
):
    factories.make_racks("18", "9,9", ip_prefix=IP_PREFIX)
    Quota.objects.filter(namespace=ns_a).update(**DEMO_QUOTAS["team-a"])
    form(request_domain(ns_a, tenant_a, "llm-pretrain", num_nodes=3))
    request_domain(ns_a, tenant_a, "moe-large", num_nodes=9)  # awaits an admin
    tenant = login(tenant_a)
    page = tenant.page("/ns/team-a/")
    trays = page.inner_text('[data-quota="trays"]')
    assert "3 in use, 9 reserved (awaiting approval) of 18" in trays
    assert page.locator('[data-quota="trays"] .bar > span.reserved').count() == 1
    screenshot(page, "tenant-quota-reserved")

    page = tenant.page("/ns/team-a/request/")
    assert "You can request up to 6 trays now" in page.inner_text("#headroom")
    assert "9 reserved by moe-large awaiting approval" in page.inner_text("#headroom")
    page.fill("#id_name", "four")
    page.fill("#id_num_nodes", "4")
    page.wait_for_selector('#preview [data-preview="ok"] >> text=placed on 4 trays')
    page.click("#submit-request")
    page.wait_for_url("**/domains/*/")
    assert ComputeDomain.objects.get(name="four").phase != Phase.PENDING
