"""The portal in real Chromium against the real server, a real Celery worker and emulated
agents: what tenants, operators and admins do, watched live without reloading."""

from __future__ import annotations

import re

import pytest

from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain, Phase
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon
from domains.tenancy.models import Quota
from domains.tenancy.services import quota_set
from testbed import factories
from testbed.agents import AgentFleet
from tests.browser.conftest import IP_PREFIX, screenshot, wait_live

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def fill_request(page, name: str, trays: int) -> None:
    page.fill("#id_name", name)
    page.fill("#id_num_nodes", str(trays))


def test_a_tenant_requests_a_domain_watches_it_form_copies_the_manifest_and_releases_it(
    login, portal_url, tenant_a, ns_a
):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    with AgentFleet(portal_url, Node.objects.filter(rack=rack)) as fleet:
        fleet.wait_joined()
        tenant = login(tenant_a)
        page = tenant.page("/ns/team-a/request/")
        fill_request(page, "train", 2)
        page.wait_for_selector('[data-preview="ok"]')
        assert page.locator("#preview svg.rack .highlight").count() == 2
        screenshot(page, "tenant-request-preview")
        page.click("#submit-request")
        page.wait_for_url("**/domains/*/")
        wait_live(page)
        page.evaluate("window.__notReloaded = true")

        page.wait_for_selector('#domain-phase[data-phase="Ready"]', timeout=30_000)
        assert page.evaluate("window.__notReloaded") is True  # it became Ready live
        assert page.locator('#timeline tr[data-state="ready"]').count() == 2
        assert page.locator(".matrix td.peer-CONNECTED").count() == 2
        page.wait_for_selector("#copy-deployment")
        screenshot(page, "tenant-domain-ready")

        page.click("#copy-deployment")
        page.wait_for_selector("text=Copied to the clipboard.")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert "kind: Deployment" in copied
        assert copied.strip() == page.inner_text("#manifest-deployment").strip()

        page.click("#release-link")
        page.click("#confirm-release")
        page.wait_for_selector('#domain-phase[data-phase="Released"]', timeout=30_000)
        domain = ComputeDomain.objects.get(name="train")
        assert domain.phase == Phase.RELEASED
        for member in domain.members.select_related("node"):
            assert fleet.leftovers(member.node.hostname) == []


def test_over_quota_is_refused_until_an_admin_raises_the_quota(
    login, portal_url, tenant_b, ns_b, admin
):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    tenant = login(tenant_b)
    page = tenant.page("/ns/team-b/request/")
    fill_request(page, "wide", 8)
    page.wait_for_selector('[data-preview="over-quota"]')
    page.click("#submit-request")
    page.wait_for_selector(".errorlist >> text=over the quota of namespace team-b")
    screenshot(page, "tenant-over-quota")
    assert not ComputeDomain.objects.filter(name="wide").exists()

    admin_page = login(admin).page("/manage/quotas/team-b/")
    admin_page.fill("#id_max_nodes", "16")
    admin_page.fill("#id_max_gpus", "64")
    admin_page.click("#save-quota")
    admin_page.wait_for_selector('tr[data-namespace="team-b"] >> text=0 / 16')
    screenshot(admin_page, "admin-quotas")
    assert Quota.objects.get(namespace=ns_b).max_nodes == 16

    page.click("#submit-request")
    page.wait_for_url("**/domains/*/")
    assert page.locator("#domain-phase").get_attribute("data-phase") in ("Admitted", "Forming")
    assert ComputeDomain.objects.get(name="wide").num_nodes == 8


def test_an_operator_cordons_a_tray_and_the_open_rack_view_shows_it(login, portal_url, operator):
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    node = rack.nodes.get(slot=3)
    ops = login(operator)
    fabric = ops.page("/fabric/")
    wait_live(fabric)
    screenshot(fabric, "operator-fabric")
    rack_page = ops.page(f"/fabric/racks/{rack.name}/")
    wait_live(rack_page)
    rack_page.evaluate("window.__notReloaded = true")

    node_page = ops.page(f"/fabric/nodes/{node.hostname}/")
    node_page.click("text=Cordon…")
    node_page.fill("#id_reason", "replacing a fan")
    screenshot(node_page, "operator-cordon-confirm")
    node_page.click("text=Yes, cordon")
    node_page.wait_for_selector("#node-state >> text=Cordoned")
    screenshot(node_page, "operator-node")
    assert Node.objects.get(pk=node.pk).state == NodeState.CORDONED

    selector = f'svg.el g[data-hostname="{node.hostname}"][data-status="cordoned"]'
    rack_page.wait_for_selector(selector)  # pushed over the websocket, no reload
    assert rack_page.evaluate("window.__notReloaded") is True
    screenshot(rack_page, "operator-rack")
    for path, name in (("/fabric/domains/", "operator-domains"),
                       ("/fabric/channels/", "operator-channels")):  # fmt: skip
        screenshot(ops.page(path), name)


def test_a_tenant_cannot_open_another_namespaces_pages(
    browser, login, portal_url, tenant_a, tenant_b, ns_a, admin
):
    factories.make_racks("4", ip_prefix=IP_PREFIX)
    from domains.computedomains import services
    from domains.computedomains.specs import DomainSpec

    theirs = services.domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="secret", num_nodes=1)
    )
    context = browser.new_context(base_url=portal_url)  # signs in through the form
    try:
        page = context.new_page()
        page.goto("/ns/team-b/")
        page.wait_for_url("**/login/**")
        screenshot(page, "login")
        page.fill("#id_username", "bob")
        page.fill("#id_password", tenant_b.raw_password)
        page.click("button[type=submit]")
        page.wait_for_url("**/ns/team-b/")
        wait_live(page)
        screenshot(page, "tenant-dashboard")
        for path in ("/ns/team-a/", "/ns/team-a/request/", f"/ns/team-a/domains/{theirs.uid}/",
                     f"/ns/team-a/domains/{theirs.uid}/manifests/job.yaml",
                     "/fabric/", "/manage/quotas/"):  # fmt: skip
            response = page.goto(path)
            assert response.status in (403, 404), path
            assert "secret" not in page.content()
        assert page.goto("/ns/team-a/").status == 404
        page.goto("/ns/team-b/")
        page.click("text=Log out")
        page.wait_for_load_state()
        assert page.goto("/ns/team-b/").url.split("?")[0].endswith("/login/")
    finally:
        context.close()
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=1)
    services.domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="big-one", num_nodes=3)
    )
    admin_session = login(admin)
    approvals = admin_session.page("/manage/approvals/")
    assert approvals.locator('[data-domain="big-one"] svg.rack .highlight').count() == 3
    for path, name in (("/manage/approvals/", "admin-approvals"),
                       ("/manage/audit/", "admin-audit"),
                       ("/manage/namespaces/", "admin-namespaces")):  # fmt: skip
        screenshot(admin_session.page(path), name)


def test_the_live_indicator_reconnects_by_itself_and_catches_up(login, portal_url, operator):
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    node = rack.nodes.get(slot=5)
    sockets = []

    def handler(ws) -> None:
        # Answered by the test, not the server: this page hears nothing it isn't told.
        sockets.append(ws)

    ops = login(operator)
    page = ops.context.new_page()
    page.route_web_socket(re.compile(r".*/ws/live/.*"), handler)
    page.goto(f"/fabric/racks/{rack.name}/")
    wait_live(page)
    page.evaluate("window.__notReloaded = true")
    page.wait_for_timeout(1000)  # let the refresh that every (re)connect fires settle

    node_cordon(actor=Actor.for_user(operator), node=node, reason="unheard")
    selector = f'svg.el g[data-hostname="{node.hostname}"][data-status="cordoned"]'
    page.wait_for_timeout(800)
    assert page.locator(selector).count() == 0  # the change went unannounced here

    sockets[0].close()  # the connection drops
    page.wait_for_function("document.getElementById('live-status').dataset.state !== 'live'")
    wait_live(page)  # ... and comes back by itself
    assert len(sockets) == 2
    page.wait_for_selector(selector)  # and the page caught up on what it missed
    assert page.evaluate("window.__notReloaded") is True


def test_the_fleet_view_shows_a_hundred_racks_on_one_screen(login, portal_url, operator):
    factories.make_racks(*(["18"] * 99), "9,9", ip_prefix=IP_PREFIX)
    page = login(operator).page("/fabric/")
    assert page.locator("#heatmap a.hm").count() == 100
    assert page.locator("#heatmap a.hm i").count() == 1800
    assert page.inner_text('[data-band="gpus-total"]') == "7200"
    box = page.locator("#heatmap").bounding_box()
    assert box is not None and box["height"] < 1000  # every rack at a glance
    assert page.locator("svg.el").count() == 12  # elevations come a page at a time
    screenshot(page, "operator-fleet-100-racks", full_page=False)
    page.click("#next-racks")
    page.wait_for_url("**page=2")
    assert page.locator("svg.el").first.get_attribute("aria-label").startswith("Rack gb-r13 ")
