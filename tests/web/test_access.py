"""Every page refuses the wrong audience: anonymous → login, tenants of another namespace
→ 404, tenants on operator/admin pages → 403."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def _login(client, user):
    client.force_login(user)
    return client


def operator_urls(topology):
    node = topology.nodes.order_by("slot").first()
    return [
        reverse("operator:fabric"),
        reverse("operator:rack", args=[topology.name]),
        reverse("operator:node", args=[node.hostname]),
        reverse("operator:node_action", args=[node.hostname, "cordon"]),
        reverse("operator:domains"),
        reverse("operator:channels"),
    ]


ADMIN_URLS = [
    ("admin_ui:quotas", []),
    ("admin_ui:quota_edit", ["team-a"]),
    ("admin_ui:approvals", []),
    ("admin_ui:namespaces", []),
    ("admin_ui:namespace", ["team-a"]),
    ("admin_ui:audit", []),
]


def tenant_urls(domain):
    ns = domain.namespace.name
    return [
        reverse("tenant:dashboard", args=[ns]),
        reverse("tenant:request", args=[ns]),
        reverse("tenant:domain", args=[ns, domain.uid]),
        reverse("tenant:release", args=[ns, domain.uid]),
        reverse("tenant:manifest", args=[ns, domain.uid, "job"]),
    ]


def test_anonymous_users_are_sent_to_the_login_page(client, ready_domain, topology, admin):
    urls = operator_urls(topology) + tenant_urls(ready_domain)
    urls += [reverse(name, args=args) for name, args in ADMIN_URLS]
    for url in urls:
        resp = client.get(url)
        assert resp.status_code == 302, url
        assert resp["Location"].startswith(reverse("login")), url


def test_a_tenant_gets_404_for_every_page_of_another_namespace(client, ready_domain, tenant_b):
    _login(client, tenant_b)
    for url in tenant_urls(ready_domain):
        assert client.get(url).status_code == 404, url
    ns = ready_domain.namespace.name
    assert client.post(reverse("tenant:preview", args=[ns]), {}).status_code == 404
    resp = client.post(reverse("tenant:release", args=[ns, ready_domain.uid]))
    assert resp.status_code == 404
    ready_domain.refresh_from_db()
    assert ready_domain.phase == "Ready"


def test_a_namespace_that_does_not_exist_is_also_404(client, tenant_a):
    _login(client, tenant_a)
    assert client.get(reverse("tenant:dashboard", args=["nope"])).status_code == 404


def test_tenants_cannot_open_operator_or_admin_pages(client, tenant_a, topology):
    _login(client, tenant_a)
    for url in operator_urls(topology):
        assert client.get(url).status_code == 403, url
    for name, args in ADMIN_URLS:
        assert client.get(reverse(name, args=args)).status_code == 403, name


def test_operators_see_the_fabric_and_tenant_pages_but_not_admin_pages(
    client, operator, topology, ready_domain
):
    _login(client, operator)
    for url in operator_urls(topology):
        assert client.get(url).status_code == 200, url
    ns = ready_domain.namespace.name
    assert client.get(reverse("tenant:dashboard", args=[ns])).status_code == 200
    assert client.get(reverse("tenant:domain", args=[ns, ready_domain.uid])).status_code == 200
    # Operators read every namespace but do not request domains for tenants.
    assert client.get(reverse("tenant:request", args=[ns])).status_code == 403
    for name, args in ADMIN_URLS:
        assert client.get(reverse(name, args=args)).status_code == 403, name


def test_admins_open_every_page(client, admin, topology, ready_domain):
    _login(client, admin)
    urls = operator_urls(topology) + tenant_urls(ready_domain)
    urls += [reverse(name, args=args) for name, args in ADMIN_URLS]
    for url in urls:
        assert client.get(url).status_code == 200, url


def test_a_viewer_sees_the_namespace_but_cannot_request_or_release(client, viewer_a, ready_domain):
    _login(client, viewer_a)
    ns = ready_domain.namespace.name
    assert client.get(reverse("tenant:dashboard", args=[ns])).status_code == 200
    page = client.get(reverse("tenant:domain", args=[ns, ready_domain.uid]))
    assert page.status_code == 200
    assert b"release-link" not in page.content
    assert client.get(reverse("tenant:request", args=[ns])).status_code == 403
    assert client.post(reverse("tenant:release", args=[ns, ready_domain.uid])).status_code == 403


def test_home_sends_each_audience_to_its_start(client, tenant_a, operator, db):
    _login(client, tenant_a)
    assert client.get("/")["Location"] == reverse("tenant:dashboard", args=["team-a"])
    _login(client, operator)
    assert client.get("/")["Location"] == reverse("operator:fabric")


def test_a_wrong_password_is_explained_on_the_login_page(client, tenant_a):
    resp = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert resp.status_code == 200
    assert 'role="alert"' in resp.content.decode()
    assert "_auth_user_id" not in client.session
