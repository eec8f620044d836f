"""axe-core in real Chromium over every page of every role, on a desktop and a phone: no
serious and no critical violation anywhere.

axe-core comes from npm, pinned in tests/browser/axe/package-lock.json; install it with
`npm ci --prefix tests/browser/axe`. Without it this test fails saying so: an accessibility
check that silently skips is one nobody runs."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.utils import timezone

from domains.agents.heartbeats import agent_report
from domains.agents.jointokens import join_token_create
from domains.audit.events import Actor
from domains.computedomains.models import Incident
from domains.computedomains.services import domain_release
from domains.foresight.maintenance import maintenance_schedule
from domains.inventory.models import Rack
from domains.inventory.services import node_cordon, node_mark_down
from domains.notifications.models import Channel, Kind
from domains.notifications.services import subscription_create
from domains.tenancy.services import quota_set
from domains.tenancy.tokens import token_create
from testbed import factories
from tests.browser.conftest import IP_PREFIX
from tests.support.lifecycle import all_clean, form, ready_report, request_domain

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AXE_DIR = Path(__file__).parent / "axe"
AXE = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
INSTALL = "npm ci --prefix tests/browser/axe"
FAILING = ("serious", "critical")
VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}
# Everything a page hides behind a click that is still part of the page: closed <details>
# (the manifests, the hover cards' long forms) are opened so their text is judged too.
OPEN_ALL = "document.querySelectorAll('details').forEach(d => { d.open = true; })"
RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({target: n.target.join(' '), summary: n.failureSummary})),
  }));
}"""


@pytest.fixture(scope="module")
def axe_source() -> Path:
    if not AXE.exists():
        pytest.fail(f"axe-core is not installed ({AXE} is missing): run `{INSTALL}`")
    return AXE


def _world(operator, admin, tenant_a, ns_a) -> dict[str, object]:
    """Two racks (one clique, two cliques), a Ready, a Degraded, a Released and a pending
    domain, a cordoned tray, a maintenance window, tokens and a subscription."""
    racks = factories.make_racks("18", "9,9", ip_prefix=IP_PREFIX)
    # Subscribed first, so the worker has notifications to list by the time the page opens.
    subscription = subscription_create(
        user=tenant_a, channel=Channel.IN_APP, kinds=[Kind.DEGRADED, Kind.READY]
    )
    by_operator, by_admin = Actor.for_user(operator), Actor.for_user(admin)
    ready = form(request_domain(ns_a, tenant_a, "train", num_nodes=3))
    degraded = form(request_domain(ns_a, tenant_a, "tune", num_nodes=2))
    dead = degraded.members.order_by("index").last().node
    agent_report(node=dead, report=ready_report(degraded))
    node_mark_down(actor=by_operator, node=dead, reason="PSU fault")
    ended = form(request_domain(ns_a, tenant_a, "finished", num_nodes=2))
    domain_release(actor=Actor.for_user(tenant_a), domain=ended)
    all_clean(ended)
    node_cordon(actor=by_operator, node=racks[1].nodes.get(slot=9), reason="fan")
    quota_set(actor=by_admin, namespace=ns_a, approval_above_nodes=4)
    request_domain(ns_a, tenant_a, "waits", num_nodes=5)
    maintenance_schedule(
        actor=by_operator,
        starts_at=timezone.now() + timedelta(days=3),
        ends_at=timezone.now() + timedelta(days=3, hours=4),
        reason="busbar inspection",
        rack=racks[0].name,
    )
    for user in (tenant_a, operator, admin):
        token_create(actor=Actor.for_user(user), user=user, name="ci")
    join_token_create(actor=by_admin, name="rack-three")
    return {
        "ready": ready, "degraded": degraded, "ended": ended, "racks": racks,
        "node": ready.members.order_by("index").first().node, "subscription": subscription,
        "incident": Incident.objects.get(node=dead),
    }  # fmt: skip


def _pages(world: dict) -> dict[str, list[str]]:
    ready, degraded, ended = world["ready"], world["degraded"], world["ended"]
    rack: Rack = world["racks"][1]
    node = world["node"]
    tenant = [
        "/ns/team-a/",
        "/ns/team-a/request/",
        f"/ns/team-a/domains/{ready.uid}/",
        f"/ns/team-a/domains/{degraded.uid}/",
        f"/ns/team-a/domains/{ended.uid}/",
        f"/ns/team-a/domains/{ready.uid}/release/",
        "/tokens/",
        "/notifications/",
        f"/notifications/subscriptions/{world['subscription'].pk}/",
    ]
    operator = [
        f"/fabric/racks/{rack.name}/",
        f"/fabric/racks/{node.rack.name}/",
        f"/fabric/cliques/{node.clique.label}/",
        f"/fabric/nodes/{node.hostname}/",
        f"/fabric/nodes/{degraded.members.order_by('index').last().node.hostname}/",
        f"/fabric/nodes/{node.hostname}/drain/",
        f"/fabric/trays/bulk/?action=cordon&tray={rack.name}-t01&tray={rack.name}-t02",
        "/fabric/domains/",
        "/fabric/domains/?phase=Failed",
        "/fabric/channels/",
        "/fabric/maintenance/",
        "/fabric/incidents/",
        f"/fabric/incidents/{world['incident'].pk}/",
        "/fabric/attention/",
        "/fabric/attention/?sort=-since",
        "/fabric/versions/",
        "/fabric/maintenance/calendar/",
        "/fabric/maintenance/calendar/?view=month",
        f"/fabric/impact/switch_tray/{rack.name}-s01/",
        f"/fabric/impact/power_shelf/{rack.name}-p1/",
        "/tokens/",
        "/notifications/",
        "/fabric/",  # last: the Fleet pages are being redrawn
    ]
    admin = [
        "/manage/namespaces/",
        "/manage/namespaces/team-a/",
        "/manage/quotas/",
        "/manage/quotas/team-a/",
        "/manage/approvals/",
        "/manage/audit/",
        "/manage/tokens/",
        "/tokens/",
        "/notifications/",
    ]
    return {"tenant": tenant, "operator": operator, "admin": admin}


def _check(page, path: str, status: int = 200) -> list[dict]:
    """Load `path` (the page itself, answered with `status`: no redirect elsewhere), let
    htmx settle, open what is folded, and run axe."""
    response = page.goto(path)
    assert response is not None and response.status == status, (path, response and response.status)
    assert urlparse(page.url).path == urlparse(path).path, (path, page.url)
    if path.endswith("/request/"):  # the form with its live preview
        page.fill("#id_name", "axe")
        page.fill("#id_num_nodes", "2")
        page.wait_for_selector("[data-preview]")
    return _axe(page)


def _axe(page) -> list[dict]:
    page.wait_for_load_state("networkidle")
    page.evaluate(OPEN_ALL)
    return page.evaluate(RUN_AXE)


def _readable(found: list[tuple[str, str, dict]]) -> str:
    lines = []
    for who, path, v in found:
        lines.append(f"{who} {path}: [{v['impact']}] {v['id']}: {v['help']}")
        for node in v["nodes"][:5]:
            summary = " ".join(node["summary"].split())
            lines.append(f"    {node['target']}\n        {summary[:300]}")
        if len(v["nodes"]) > 5:
            lines.append(f"    … and {len(v['nodes']) - 5} more elements")
    return "\n".join(lines)


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_no_page_has_a_serious_or_critical_axe_violation_for_any_role(
    viewport, axe_source, browser, login, portal_url, operator, admin, tenant_a, ns_a
):
    pages = _pages(_world(operator, admin, tenant_a, ns_a))
    width, height = VIEWPORTS[viewport]
    found: list[tuple[str, str, dict]] = []

    anonymous = browser.new_context(
        base_url=portal_url, viewport={"width": width, "height": height}
    )
    try:
        page = anonymous.new_page()
        page.add_init_script(path=str(axe_source))
        for path, status in (("/login/", 200), ("/no-such-page/", 404)):
            found += [("anonymous", path, v) for v in _check(page, path, status)]
    finally:
        anonymous.close()
    forbidden = {"tenant": "/fabric/", "operator": "/manage/quotas/"}
    for role, user in (("tenant", tenant_a), ("operator", operator), ("admin", admin)):
        page = login(user).context.new_page()
        page.set_viewport_size({"width": width, "height": height})
        # An init script is the browser's own: the page's Content-Security-Policy lets it in.
        page.add_init_script(path=str(axe_source))
        for path in pages[role]:
            found += [(role, path, v) for v in _check(page, path)]
        if role in forbidden:
            found += [(role, forbidden[role], v) for v in _check(page, forbidden[role], 403)]

    counts = Counter(v["impact"] for _, _, v in found for _ in v["nodes"])
    print(f"axe, {viewport}: elements per impact {dict(counts)}")
    others = [item for item in found if item[2]["impact"] not in FAILING]
    if others:  # shown, not failed: minor and moderate findings are for a person to judge
        print(_readable(others))
    failing = [item for item in found if item[2]["impact"] in FAILING]
    assert not failing, f"axe found serious or critical violations:\n{_readable(failing)}"


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_forms_answering_with_errors_and_warnings_have_no_serious_axe_violation(
    viewport, axe_source, browser, login, portal_url, admin, tenant_a, ns_a
):
    """The states a walk over GET pages never reaches: a refused sign-in, a request the
    server sends back with errors on its fields, a quota form's errors, a saved quota's
    warning."""
    factories.make_racks("18", ip_prefix=IP_PREFIX)
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    size = dict(zip(("width", "height"), VIEWPORTS[viewport], strict=True))
    found: list[tuple[str, str, dict]] = []

    anonymous = browser.new_context(base_url=portal_url, viewport=size)
    try:
        page = anonymous.new_page()
        page.add_init_script(path=str(axe_source))
        page.goto("/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "not-her-password")
        page.click("button[type=submit]")
        page.wait_for_selector(".errorlist, .form-error")
        found += [("anonymous", "/login/ refused", v) for v in _axe(page)]
    finally:
        anonymous.close()

    page = login(tenant_a).context.new_page()
    page.set_viewport_size(size)
    page.add_init_script(path=str(axe_source))
    page.goto("/ns/team-a/request/")
    page.fill("#id_name", "-Bad_Name-")
    page.fill("#id_num_nodes", "2")
    page.click("#submit-request")
    page.wait_for_selector("#id_name-errors")
    found += [("tenant", "request refused", v) for v in _axe(page)]

    page = login(admin).context.new_page()
    page.set_viewport_size(size)
    page.add_init_script(path=str(axe_source))
    page.goto("/manage/quotas/team-a/")
    page.eval_on_selector("#save-quota", "b => b.form.noValidate = true")  # past the browser
    page.fill("#id_max_gpus", "-3")
    page.click("#save-quota")
    page.wait_for_selector("#id_max_gpus-errors")
    found += [("admin", "quota refused", v) for v in _axe(page)]
    page.fill("#id_max_gpus", "4")  # below the 8 GPUs team-a holds: saved, with a warning
    page.click("#save-quota")
    page.wait_for_selector(".msg-warning")
    found += [("admin", "quota saved below use", v) for v in _axe(page)]

    failing = [item for item in found if item[2]["impact"] in FAILING]
    assert not failing, f"axe found serious or critical violations:\n{_readable(failing)}"


def _admin_pages() -> list[str]:
    """The Django admin's index and every model's list (and one change page, read-only)."""
    from django.contrib import admin as django_admin

    lists = sorted(
        f"/django-admin/{m._meta.app_label}/{m._meta.model_name}/"
        for m in django_admin.site._registry
    )
    return ["/django-admin/", *lists]


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_api_docs_and_the_django_admin_have_no_serious_axe_violation(
    viewport, axe_source, login, admin, tenant_a, ns_a
):
    """Swagger UI (the API's docs, third-party markup) and the Django admin are pages of
    the portal too."""
    world_rack = factories.make_racks("18", ip_prefix=IP_PREFIX)[0]
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    node = world_rack.nodes.order_by("slot").first()
    size = dict(zip(("width", "height"), VIEWPORTS[viewport], strict=True))
    found: list[tuple[str, str, dict]] = []
    for who, user, paths in (
        ("tenant", tenant_a, ["/api/v1/docs/"]),
        ("admin", admin, [*_admin_pages(), f"/django-admin/inventory/node/{node.pk}/change/"]),
    ):
        page = login(user).context.new_page()
        page.set_viewport_size(size)
        page.add_init_script(path=str(axe_source))
        for path in paths:
            page.goto(path)
            if path.startswith("/api/"):
                page.wait_for_selector(".swagger-ui .opblock-tag", timeout=30_000)
            found += [(who, path, v) for v in _axe(page)]
    others = [item for item in found if item[2]["impact"] not in FAILING]
    if others:
        print(_readable(others))
    failing = [item for item in found if item[2]["impact"] in FAILING]
    assert not failing, f"axe found serious or critical violations:\n{_readable(failing)}"
