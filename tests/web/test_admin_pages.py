"""Portal admin pages: usage beside quota limits, the approvals badge and why a request
waits, every user's tokens, and the audit log a page at a time."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.inventory.models import Node
from domains.inventory.services import node_cordon, node_uncordon
from domains.tenancy.models import ApiToken
from domains.tenancy.services import quota_set
from domains.tenancy.tokens import token_create
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def test_the_quota_form_shows_what_the_namespace_uses_now(client, admin, topology, tenant_a, ns_a):
    form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    client.force_login(admin)
    page = client.get(reverse("admin_ui:quota_edit", args=["team-a"])).content.decode()
    assert "In use now: 8 GPUs." in page
    assert "In use now: 2 trays." in page
    assert "In use now: 1 live domains." in page


def test_admins_see_how_many_requests_wait_and_why(client, admin, topology, tenant_a, ns_a):
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=2)
    request_domain(ns_a, tenant_a, "big", num_nodes=3)
    client.force_login(admin)
    page = client.get(reverse("admin_ui:quotas")).content.decode()
    assert 'id="approvals-count" aria-label="1 waiting">1</span>' in page
    approvals = client.get(reverse("admin_ui:approvals")).content.decode()
    assert "3 trays is above team-a&#x27;s approval threshold of 2 trays" in approvals
    client.force_login(tenant_a)
    assert (
        "approvals-count"
        not in client.get(reverse("tenant:dashboard", args=["team-a"])).content.decode()
    )


def test_admins_list_and_revoke_any_users_token(client, admin, tenant_a, tenant_b, operator):
    token, raw = token_create(actor=Actor.for_user(tenant_a), user=tenant_a, name="ci")
    token_create(actor=Actor.for_user(tenant_b), user=tenant_b, name="laptop")
    url = reverse("admin_ui:tokens")
    for outsider in (tenant_a, operator):
        client.force_login(outsider)
        assert client.get(url).status_code == 403
        assert client.post(reverse("admin_ui:token_revoke", args=[token.pk])).status_code == 403
    client.force_login(admin)
    page = client.get(url).content.decode()
    assert 'data-user="alice"' in page and 'data-user="bob"' in page
    assert raw not in page and token.prefix in page
    assert 'data-user="bob"' not in client.get(url, {"user": "ali"}).content.decode()
    done = client.post(reverse("admin_ui:token_revoke", args=[token.pk]), follow=True)
    assert "Revoked alice&#x27;s token ci" in done.content.decode()
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    revoked = Event.objects.get(verb="token.revoked")
    assert revoked.actor_name == "admin"


def test_the_audit_log_pages_back_through_every_event(client, admin, operator, topology):
    tray = Node.objects.order_by("slot").first()
    actor = Actor.for_user(operator)
    for i in range(110):
        node_cordon(actor=actor, node=tray, reason=f"round {i}")
        node_uncordon(actor=actor, node=tray, reason=f"round {i}")
    total = Event.objects.count()
    assert total >= 220
    client.force_login(admin)
    url = reverse("admin_ui:audit")
    first = client.get(url, {"actor": "operator"}).content.decode()
    assert 'id="audit-older"' in first and 'id="audit-newer"' not in first
    assert "Matching events 1\N{EN DASH}200" in first
    second = client.get(url, {"actor": "operator", "page": 2}).content.decode()
    assert "Matching events 201\N{EN DASH}220" in second
    assert 'id="audit-older"' not in second and "actor=operator&page=1" in second
    assert "round 0" in second and "round 0" not in first
    assert client.get(url, {"page": "x"}).status_code == 200
