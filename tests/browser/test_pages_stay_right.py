"""Bugs found in the pages, each seen in real Chromium: the request preview, a domain's page through
every phase and after release, tray actions offered by state (mark down / mark up among
them), and the small things (durations, doubled words, the MPIJob name, YAML anchors, the
favicon). The controller's worker runs for real; the agents' reports go through the same
services their HTTP calls reach (`tests.support.lifecycle`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain, Phase
from domains.computedomains.services import domain_release
from domains.foresight.maintenance import maintenance_schedule
from domains.inventory.models import Node, NodeState
from domains.inventory.services import node_cordon
from domains.tenancy.services import quota_set
from testbed import factories
from tests.browser.conftest import IP_PREFIX, screenshot, wait_live
from tests.support.lifecycle import all_clean, all_ready, form, request_domain

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _wait_phase(domain: ComputeDomain, phase: str, page) -> ComputeDomain:
    """Until the worker moved the domain to `phase` (checked between browser waits)."""
    for _ in range(150):
        domain.refresh_from_db()
        if domain.phase == phase:
            return domain
        page.wait_for_timeout(100)
    raise AssertionError(f"{domain} stayed {domain.phase}, never {phase}")


def test_the_preview_says_what_is_wrong_and_never_keeps_an_old_fits(
    login, portal_url, tenant_a, ns_a
):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    request_domain(ns_a, tenant_a, "train", num_nodes=1)
    page = login(tenant_a).page("/ns/team-a/request/")
    page.fill("#id_name", "other")
    page.fill("#id_num_nodes", "1")
    page.wait_for_selector('[data-preview="ok"]')

    page.fill("#id_name", "train")  # already live: was a 500 under the old green box
    page.wait_for_selector('[data-preview="invalid"]')
    text = page.inner_text("#preview")
    assert "Name: a live domain named 'train' already exists" in text
    assert "Fits." not in text

    page.fill("#id_name", "")  # emptied: nothing wrong, something still to fill in
    page.wait_for_selector('#preview [data-preview="incomplete"] >> text=Still to fill in: Name')
    assert "None" not in page.inner_text("#preview") and "Fits." not in page.inner_text("#preview")


def test_a_domain_page_is_right_in_every_phase_and_after_release(login, portal_url, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    page = login(tenant_a).page("/ns/team-a/request/")
    page.fill("#id_name", "train")
    page.fill("#id_num_nodes", "2")
    page.wait_for_selector('[data-preview="ok"]')
    page.click("#submit-request")
    page.wait_for_url("**/domains/*/")
    wait_live(page)
    assert page.inner_text(".messages").strip() == "Requested train."
    domain = _wait_phase(ComputeDomain.objects.get(name="train"), Phase.FORMING, page)
    page.wait_for_selector('#domain-phase[data-phase="Forming"]')
    assert page.locator(".rack-card[data-rack] svg.rack .highlight").count() == 2

    all_ready(domain)  # the agents report ready at once: no configuring step of their own
    page.wait_for_selector('#domain-phase[data-phase="Ready"]')
    assert "waiting for placement" not in page.inner_text("main")
    assert page.locator("#timeline .step:not(.done)").count() == 0
    assert page.locator("#domain-reason").count() == 0  # "Ready" said once
    assert page.inner_text("#manifests summary >> nth=2") == "MPIJob"
    assert "&id0" not in page.inner_text("#manifest-deployment")

    page.click("#release-link")
    page.click("#confirm-release")
    page.wait_for_selector('#domain-phase[data-phase="Releasing"]')
    all_clean(domain)
    page.wait_for_selector('#domain-phase[data-phase="Released"]')
    screenshot(page, "tenant-domain-released")
    assert page.locator("#domain-reason").count() == 0  # not "Released Released"
    assert page.locator("#domain-lease").count() == 0
    assert page.inner_text("#domain-ended").endswith("ago)")
    assert page.locator("#timeline td.daemon", has_text="READY").count() == 0
    assert page.locator("#timeline td.daemon", has_text="stopped").count() == 2
    assert page.locator('#peer-matrix[data-ended="yes"]').count() == 1
    assert "returned to the ledger" in page.inner_text("#domain-teardown")
    assert page.locator(".rack-card[data-rack]").count() == 0  # it no longer runs anywhere

    page.click("#request-again")
    page.wait_for_url("**/request/?*")
    assert page.input_value("#id_name") == "train"
    assert page.input_value("#id_num_nodes") == "2"
    page.wait_for_selector('[data-preview="ok"]')  # the name is free again

    dashboard = login(tenant_a).page("/ns/team-a/")
    row = dashboard.locator('tr[data-domain="train"]')
    assert row.locator("td:nth-child(2) .muted").count() == 0  # the phase, said once
    assert dashboard.locator("th", has_text="Ended (UTC)").count() == 1


def test_a_pending_domain_says_why_once(login, portal_url, tenant_a, ns_a, admin):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=1)
    domain = request_domain(ns_a, tenant_a, "big", num_nodes=3)
    page = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    assert page.inner_text("#domain-phase") == "Pending"
    assert page.inner_text("#domain-reason") == "awaiting approval"
    assert "AwaitingApproval" not in page.inner_text("main")


def test_tray_actions_are_offered_by_state_and_mark_down_needs_a_drain_first(
    login, portal_url, operator, tenant_a, ns_a
):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    node = domain.members.order_by("index").first().node
    page = login(operator).page(f"/fabric/nodes/{node.hostname}/")

    def offered() -> list[str]:
        return page.locator("#tray-actions [data-action]").evaluate_all(
            "els => els.map(e => e.dataset.action)"
        )

    assert offered() == ["cordon", "drain", "mark_down"]
    page.goto(f"/fabric/nodes/{node.hostname}/uncordon/")  # not offered, but typed in
    assert "is ready already: uncordon changes nothing" in page.inner_text("#action-refusal")
    assert page.locator("#confirm-action").count() == 0

    page.goto(f"/fabric/nodes/{node.hostname}/")
    page.click('[data-action="mark_down"]')
    assert "drain it first" in page.inner_text("#action-refusal")
    assert "train\tteam-a" in page.inner_text(".blast-domains")

    page.goto(f"/fabric/nodes/{node.hostname}/")
    page.click('[data-action="drain"]')
    page.fill("#id_reason", "PSU fault")
    page.click("#confirm-action")
    page.wait_for_selector("#node-state >> text=Draining")
    assert offered() == ["cordon", "uncordon", "mark_down"]

    page.click('[data-action="mark_down"]')
    page.click("#confirm-action")
    page.wait_for_selector("#node-state >> text=Down")
    assert offered() == ["mark_up"]
    domain.refresh_from_db()
    assert domain.phase == Phase.DEGRADED

    page.click('[data-action="mark_up"]')
    page.click("#confirm-action")
    page.wait_for_selector("#node-state >> text=Unknown")
    assert Node.objects.get(pk=node.pk).state == NodeState.UNKNOWN
    screenshot(page, "operator-node-marked-up")


def test_small_things_read_right(login, portal_url, operator, admin, ns_a):
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    node_cordon(actor=Actor.for_user(operator), node=rack.nodes.get(slot=2), reason="fan")

    quota_set(actor=Actor.for_user(admin), namespace=ns_a, max_lifetime=timedelta(days=7))
    missing: list[str] = []
    session = login(admin)
    session.context.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page = session.page("/manage/quotas/")
    assert page.inner_text('tr[data-namespace="team-a"] td >> nth=5') == "7 days"
    page.goto(f"/fabric/racks/{rack.name}/")
    row = page.inner_text(f'tr[data-hostname="{rack.nodes.get(slot=2).hostname}"]')
    assert "cordoned cordoned" not in row and "cordoned" in row
    page.wait_for_load_state("networkidle")
    assert missing == []
    assert page.evaluate("fetch('/favicon.ico').then(r => r.ok)") is True


def test_the_rack_and_tray_pages_fit_a_phone(login, portal_url, operator, tenant_a, ns_a):
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    node_cordon(actor=Actor.for_user(operator), node=rack.nodes.get(slot=5), reason="fan")
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    page = login(operator).context.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    for path in (f"/fabric/racks/{rack.name}/", f"/fabric/nodes/{rack.nodes.get(slot=1)}/"):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
    screenshot(page, "operator-rack-phone")


def test_an_operator_filters_the_fleet_and_drains_a_clique_after_seeing_who_it_touches(
    login, portal_url, operator, tenant_a, ns_a
):
    racks = factories.make_racks("18", "9,9", ip_prefix=IP_PREFIX)
    domain = form(
        request_domain(
            ns_a, tenant_a, "train", placement_constraint="rack", placement_target=racks[1].name
        )
    )
    page = login(operator).page("/fabric/")
    wait_live(page)
    assert page.inner_text('[data-band="trays-used"]') == "2"
    page.select_option("#id_tenant", "team-a")
    page.click("#fleet-filters button[type=submit]")
    page.wait_for_selector("#fleet-matches >> text=2 matching trays in 1 rack")
    assert page.locator("#heatmap a.hm").count() == 1
    screenshot(page, "operator-fleet-filtered")

    clique = domain.members.first().clique
    page.goto(f"/fabric/cliques/{clique.label}/")
    page.check("input[data-check-all]")
    assert page.locator('input[name="tray"]:checked').count() == 9
    page.click("#bulk-drain")
    page.wait_for_selector("#bulk-trays")
    assert page.inner_text("#bulk-changes") == "9"
    assert "team-a" in page.inner_text(".blast-tenants")
    screenshot(page, "operator-bulk-drain-preview")
    page.fill("#id_reason", "busbar work")
    page.click("#confirm-bulk")
    page.wait_for_selector(".messages >> text=Drain done on 9 tray(s).")
    assert Node.objects.filter(clique=clique, state=NodeState.DRAINING).count() == 9


def _phone_pages(rack, clique, node, domain, ended) -> dict[str, list[str]]:
    tenant = [
        "/ns/team-a/",
        "/ns/team-a/request/",
        f"/ns/team-a/domains/{domain.uid}/",
        f"/ns/team-a/domains/{ended.uid}/",
        f"/ns/team-a/domains/{domain.uid}/release/",
        "/tokens/",
        "/notifications/",
    ]
    operator = [
        "/fabric/",
        "/fabric/?tenant=team-a",
        f"/fabric/racks/{rack.name}/",
        f"/fabric/cliques/{clique.label}/",
        f"/fabric/nodes/{node.hostname}/",
        f"/fabric/nodes/{node.hostname}/drain/",
        "/fabric/domains/",
        "/fabric/channels/",
        "/fabric/maintenance/",
        f"/fabric/impact/switch_tray/{rack.name}-s01/",
        f"/fabric/impact/power_shelf/{rack.name}-p1/",
        f"/ns/team-a/domains/{domain.uid}/",
        "/tokens/",
        "/notifications/",
    ]
    admin = [
        *operator,
        "/manage/quotas/",
        "/manage/quotas/team-a/",
        "/manage/approvals/",
        "/manage/namespaces/",
        "/manage/namespaces/team-a/",
        "/manage/audit/",
        "/manage/tokens/",
    ]
    return {"tenant": tenant, "operator": operator, "admin": admin}


def test_no_page_is_wider_than_a_phone_for_any_role(
    browser, login, portal_url, operator, admin, tenant_a, ns_a
):
    (rack,) = factories.make_racks("9,9", ip_prefix=IP_PREFIX)
    domain = form(request_domain(ns_a, tenant_a, "a-rather-long-domain-name-x", num_nodes=3))
    ended = form(request_domain(ns_a, tenant_a, "finished", num_nodes=2))
    domain_release(actor=Actor.for_user(tenant_a), domain=ended)
    all_clean(ended)
    node = domain.members.order_by("index").first().node
    node_cordon(actor=Actor.for_user(operator), node=rack.nodes.get(slot=9), reason="fan")
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=2)
    request_domain(ns_a, tenant_a, "waits", num_nodes=3)
    maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=timezone.now() + timedelta(days=3),
        ends_at=timezone.now() + timedelta(days=3, hours=4),
        reason="busbar inspection",
        rack=rack.name,
    )
    pages = _phone_pages(rack, node.clique, node, domain, ended)
    anonymous = browser.new_context(base_url=portal_url, viewport={"width": 390, "height": 844})
    try:
        page = anonymous.new_page()
        page.goto("/login/")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, "/login/"
    finally:
        anonymous.close()
    wide = []
    for role, user in (("tenant", tenant_a), ("operator", operator), ("admin", admin)):
        page = login(user).context.new_page()
        page.set_viewport_size({"width": 390, "height": 844})
        for path in pages[role]:
            response = page.goto(path)
            assert response is not None and response.status == 200, (role, path)
            if path.endswith("/request/"):
                page.fill("#id_name", "phone")
                page.fill("#id_num_nodes", "2")
                page.wait_for_selector("[data-preview]")
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > 390:
                wide.append((role, path, width))
                screenshot(page, f"phone-{role}-{len(wide)}")
    assert wide == []


def test_a_following_domains_manifests_run_the_pods_the_user_asks_for(
    login, portal_url, tenant_a, ns_a
):
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    domain = request_domain(ns_a, tenant_a, "wl", num_nodes=0)
    page = login(tenant_a).page(f"/ns/team-a/domains/{domain.uid}/")
    assert "replicas: 12" in page.inner_text("#manifest-deployment")  # team-a's most
    page.wait_for_load_state("networkidle")  # the live socket's first re-fetch is in
    page.fill("#id_replicas", "5")
    page.click("#manifests button[type=submit]")
    page.wait_for_selector("#manifest-deployment >> text=replicas: 5")
    href = page.get_attribute("#manifests a[download]", "href")
    assert href.endswith("deployment.yaml?replicas=5")
    page.fill("#id_replicas", "40")
    page.eval_on_selector("#manifests form", "f => f.noValidate = true")  # past the browser
    page.click("#manifests button[type=submit]")
    page.wait_for_selector("#id_replicas-errors")
    assert "from 1 to 12" in page.inner_text("#id_replicas-errors")
    assert page.get_attribute("#id_replicas", "aria-invalid") == "true"
