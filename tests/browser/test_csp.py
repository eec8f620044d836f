"""The Content-Security-Policy in real Chromium: every page the
portal links to, Django admin's and the API docs (Swagger UI) load with zero violations,
and what needs script still works under it: htmx, the websocket, Swagger UI, the confirm
on revoking a token."""

from __future__ import annotations

import contextlib
from collections import deque
from urllib.parse import urldefrag, urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from domains.audit.events import SYSTEM
from domains.computedomains.models import Phase
from domains.inventory.models import Node
from domains.tenancy.tokens import token_create
from testbed import factories
from tests.api.conftest import make_domain
from tests.browser.conftest import IP_PREFIX, wait_live

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Recorded from the start of every document: a violation the console does not show still
# fires this event. (An init script is the browser's own, so the policy does not block it.)
LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__csp.push(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"} in ${where}`);
});
"""
# Links never followed: they change something or leave the page's world.
SKIP = ("/logout", "/static/", "/release/", "/extend/", "/revoke/", "/remove/", "/read/",
        "/approve/", "/deny/", "/delete/", "/django-admin/logout/", "/api/v1/schema/")  # fmt: skip
MAX_PAGES = 60


def watch(page, violations: list[str]) -> None:
    page.add_init_script(LISTEN)
    page.on("console", lambda m: "Content Security Policy" in m.text and violations.append(m.text))
    page.on("pageerror", lambda e: violations.append(f"page error: {e}"))


def crawl(session, starts: list[str], violations: list[str]) -> list[str]:
    """Breadth-first over the same-origin links of every page reached, up to MAX_PAGES."""
    page = session.context.new_page()
    watch(page, violations)
    seen, queue, visited = set(starts), deque(starts), []
    while queue and len(visited) < MAX_PAGES:
        path = queue.popleft()
        response = page.goto(path)
        assert response is not None and response.status < 500, (path, response and response.status)
        policy = response.headers.get("content-security-policy", "")
        assert (
            "script-src 'self'" in policy
            and "unsafe" not in policy.split("script-src")[1].split(";")[0]
        ), (path, policy)
        # What htmx loads after the page (hx-trigger="load") is checked too; a page that
        # keeps fetching (a live view on a busy machine) is checked as it is.
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_load_state("networkidle", timeout=5_000)
        violations += [f"{path}: {v}" for v in page.evaluate("window.__csp")]
        visited.append(path)
        for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
            url = urlparse(urldefrag(href)[0])
            if url.netloc != urlparse(session.url).netloc or any(s in url.path for s in SKIP):
                continue
            target = url.path + (f"?{url.query}" if url.query else "")
            if "format=" in url.query:  # a download (CSV), not a page
                continue
            if target not in seen:
                seen.add(target)
                queue.append(target)
    page.close()
    return visited


def test_every_page_loads_with_no_csp_violation(login, portal_url, admin, ns_a, tenant_a):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    make_domain(ns_a, "train-a", nodes=nodes[:2], requested_by=tenant_a)
    make_domain(ns_a, "big-a", phase=Phase.PENDING, approval="pending", requested_by=tenant_a)
    violations: list[str] = []
    session = login(admin)
    visited = crawl(session, ["/", "/ns/team-a/", "/ns/team-a/request/", "/api/v1/docs/",
                              "/django-admin/", "/tokens/"], violations)  # fmt: skip
    assert len(visited) >= 25, visited
    assert any(p.startswith("/django-admin/inventory/") for p in visited), visited
    assert not violations, "\n".join(violations)


def test_htmx_websockets_swagger_and_confirms_work_under_the_policy(
    login, portal_url, tenant_a, ns_a
):
    factories.make_racks("4", ip_prefix=IP_PREFIX)
    violations: list[str] = []
    tenant = login(tenant_a)
    page = tenant.context.new_page()
    watch(page, violations)
    page.goto("/ns/team-a/request/")
    wait_live(page)  # the websocket
    page.fill("#id_name", "train")
    page.fill("#id_num_nodes", "2")
    page.wait_for_selector('[data-preview="ok"]')  # htmx swapped the preview in
    assert page.get_attribute("#id_placement_target", "list") == "targets"

    page.goto("/api/v1/docs/")
    page.wait_for_selector(".swagger-ui .info .title")
    page.wait_for_selector(".opblock-tag")  # the schema was fetched and drawn

    token, _ = token_create(actor=SYSTEM, user=tenant_a, name="ci-script")
    page.goto("/tokens/")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click(f"#token-{token.pk} button")
    token.refresh_from_db()
    assert token.revoked_at is None  # dismissed: nothing sent
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.click(f"#token-{token.pk} button")
    token.refresh_from_db()
    assert token.revoked_at is not None
    violations += page.evaluate("window.__csp")
    assert not violations, "\n".join(violations)
