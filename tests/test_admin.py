"""The Django admin writes nothing around the services: every page of every model answers a
superuser, none offers a form that saves a row, and the admin's actions (releasing a domain,
the tray actions, minting and revoking join tokens) go through the same services and rules
as the portal's pages."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib import admin as django_admin
from django.core.management import CommandError, call_command
from django.test import RequestFactory
from django.urls import reverse

from domains.agents.joining import agent_join
from domains.agents.jointokens import join_token_create, join_token_revoke, join_tokens_list
from domains.agents.models import JoinToken
from domains.audit.events import SYSTEM, Actor
from domains.audit.models import Event
from domains.computedomains.models import Phase
from domains.errors import InvalidInput, InvalidTransition, PermissionDenied
from domains.inventory.models import Node, NodeState
from domains.security import hash_token
from testbed import factories
from testbed.agents import node_facts
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db

# Apps whose rows the services own: no add, change or delete in the admin, ever.
OUR_APPS = {"audit", "inventory", "tenancy", "computedomains", "agents", "kube"}


@pytest.fixture
def ready_domain(topology, tenant_a, ns_a):
    return form(request_domain(ns_a, tenant_a, "train", num_nodes=2))


@pytest.fixture
def join_token(admin):
    token, _ = join_token_create(actor=Actor.for_user(admin), name="rack 7", max_uses=18)
    return token


def _url(model, view, *args):
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


def test_every_admin_page_answers_a_superuser_and_none_offers_a_form_that_saves(
    client, admin, ready_domain, join_token
):
    client.force_login(admin)
    request = RequestFactory().get("/django-admin/")
    request.user = admin
    walked = []
    assert client.get(reverse("admin:index")).status_code == 200
    for app_label in {model._meta.app_label for model in django_admin.site._registry}:
        assert client.get(reverse("admin:app_list", args=[app_label])).status_code == 200
    for model, model_admin in django_admin.site._registry.items():
        changelist = client.get(_url(model, "changelist"))
        assert changelist.status_code == 200, model
        row = model._default_manager.order_by("pk").first()
        if row is not None:
            change = client.get(_url(model, "change", row.pk))
            assert change.status_code == 200, model
            walked.append(model._meta.label)
        if model._meta.app_label not in OUR_APPS:
            continue  # Django's users and groups, django-axes' lockouts
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model
        assert client.get(_url(model, "add")).status_code == 403, model
        if row is not None:
            page = change.content.decode()
            assert 'name="_save"' not in page and 'name="_continue"' not in page, model
            assert client.post(_url(model, "change", row.pk), {}).status_code == 403, model
            delete = client.post(_url(model, "delete", row.pk), {"post": "yes"})
            assert delete.status_code == 403, model
            assert model._default_manager.filter(pk=row.pk).exists(), model
    for label in (
        "computedomains.ComputeDomain",
        "computedomains.DomainMember",
        "computedomains.ChannelAllocation",
        "inventory.Node",
        "inventory.Rack",
        "inventory.Clique",
        "inventory.Gpu",
        "tenancy.Namespace",
        "audit.Event",
        "agents.JoinToken",
    ):
        assert label in walked


def test_marking_a_tray_of_a_running_domain_down_from_the_admin_is_refused_until_drained(
    client, admin, ready_domain
):
    member = ready_domain.members.select_related("node").order_by("index").first()
    client.force_login(admin)
    changelist = _url(Node, "changelist")
    page = client.post(
        changelist,
        {"action": "node_mark_down", "_selected_action": [member.node_id]},
        follow=True,
    )
    assert "drain it first" in page.content.decode()
    member.node.refresh_from_db()
    assert member.node.state == NodeState.READY
    assert not Event.objects.filter(verb="node.marked_down").exists()

    client.post(changelist, {"action": "node_drain", "_selected_action": [member.node_id]})
    client.post(changelist, {"action": "node_mark_down", "_selected_action": [member.node_id]})
    member.node.refresh_from_db()
    assert member.node.state == NodeState.DOWN
    event = Event.objects.get(verb="node.marked_down", node=member.node)
    assert (event.actor_name, event.message) == ("admin", "from the Django admin")
    ready_domain.refresh_from_db()
    assert ready_domain.phase == Phase.DEGRADED


def test_a_tray_action_that_would_change_nothing_is_refused_in_the_admin_as_on_the_page(
    client, admin, topology
):
    node = Node.objects.order_by("slot").first()
    client.force_login(admin)
    page = client.post(
        _url(Node, "changelist"),
        {"action": "node_uncordon", "_selected_action": [node.pk]},
        follow=True,
    )
    assert "uncordon changes nothing" in page.content.decode()
    assert not Event.objects.filter(node=node).exists()


def test_a_minted_join_token_is_stored_hashed_audited_and_registers_trays_up_to_its_limit(
    admin,
):
    (rack,) = factories.make_racks("2", ip_prefix=factories.tray_ip_prefix(14))
    token, raw = join_token_create(
        actor=Actor.for_user(admin), name="rack 9", max_uses=1, expires_in=timedelta(hours=2)
    )
    assert raw.startswith("dpj_") and token.token_hash == hash_token(raw)
    assert raw not in str(JoinToken.objects.filter(pk=token.pk).values().first())
    assert token.created_by == admin and token.max_uses == 1
    event = Event.objects.get(verb="join_token.created")
    assert raw not in str(event.details) + event.message
    first, second = rack.nodes.order_by("slot")
    agent_join(facts=node_facts(first), join_token=raw)
    with pytest.raises(PermissionDenied, match="used up"):
        agent_join(facts=node_facts(second), join_token=raw)
    token.refresh_from_db()
    assert token.uses == 1


def test_a_revoked_join_token_registers_nothing_and_cannot_be_revoked_twice(admin):
    (rack,) = factories.make_racks("1", ip_prefix=factories.tray_ip_prefix(15))
    token, raw = join_token_create(actor=SYSTEM, name="leaked")
    join_token_revoke(actor=Actor.for_user(admin), token=token)
    assert Event.objects.filter(verb="join_token.revoked", actor_name="admin").exists()
    with pytest.raises(PermissionDenied):
        agent_join(facts=node_facts(rack.nodes.get()), join_token=raw)
    with pytest.raises(InvalidTransition, match="revoked already"):
        join_token_revoke(actor=SYSTEM, token=token)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "  "}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ok", "expires_in": timedelta(hours=0)}, "expires_in"),
        ({"name": "ok", "expires_in": timedelta(hours=24 * 366)}, "expires_in"),
        ({"name": "ok", "max_uses": 0}, "max_uses"),
    ],
)
def test_a_join_token_with_bad_limits_is_refused_naming_the_field(db, kwargs, field):
    with pytest.raises(InvalidInput) as refused:
        join_token_create(actor=SYSTEM, **kwargs)
    assert refused.value.field == field
    assert not JoinToken.objects.exists() and not Event.objects.exists()


def test_the_join_token_command_creates_lists_and_revokes_through_the_services(db):
    out, err = StringIO(), StringIO()
    call_command("join_token", "create", "rack 7", "--max-uses", "18", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    assert re.fullmatch(r"dpj_[\w-]+", raw) and raw not in err.getvalue()
    token = JoinToken.objects.get(token_hash=hash_token(raw))
    assert "0 of 18 uses" in err.getvalue()

    out = StringIO()
    call_command("join_token", "list", stdout=out)
    assert f"{token.pk}" in out.getvalue() and "usable" in out.getvalue()

    call_command("join_token", "revoke", "rack 7", stdout=StringIO(), stderr=StringIO())
    assert join_tokens_list().get().revoked_at is not None
    assert Event.objects.filter(verb="join_token.revoked", actor_name="system").exists()
    with pytest.raises(CommandError, match="revoked already"):
        call_command("join_token", "revoke", str(token.pk), stderr=StringIO())
    with pytest.raises(CommandError, match="no join token named 'nope'"):
        call_command("join_token", "revoke", "nope", stderr=StringIO())


def test_an_admin_mints_a_join_token_in_the_django_admin_and_sees_it_once(client, admin):
    client.force_login(admin)
    mint = reverse("admin:agents_jointoken_mint")
    assert mint in client.get(_url(JoinToken, "changelist")).content.decode()
    page = client.post(mint, {"name": "rack 3", "expires_in": "48", "max_uses": "18"})
    assert page.status_code == 200
    raw = re.search(r'<code id="join-token">(dpj_[\w-]+)</code>', page.content.decode())[1]
    token = JoinToken.objects.get(token_hash=hash_token(raw))
    assert (token.name, token.max_uses, token.created_by) == ("rack 3", 18, admin)
    assert raw not in client.get(_url(JoinToken, "change", token.pk)).content.decode()

    refused = client.post(mint, {"name": "rack 4", "expires_in": "0"})
    assert "greater than or equal to 1" in refused.content.decode()
    assert JoinToken.objects.count() == 1


def test_an_admin_revokes_join_tokens_with_the_admin_action(client, admin, join_token):
    client.force_login(admin)
    client.post(
        _url(JoinToken, "changelist"), {"action": "revoke", "_selected_action": [join_token.pk]}
    )
    join_token.refresh_from_db()
    assert join_token.revoked_at is not None
    assert Event.objects.filter(verb="join_token.revoked", actor_name="admin").exists()


def test_only_portal_admins_mint_or_revoke_join_tokens(client, join_token):
    operator = factories.make_user("ops", staff=True)
    client.force_login(operator)
    assert client.get(reverse("admin:agents_jointoken_mint")).status_code == 403
    assert (
        client.post(
            reverse("admin:agents_jointoken_mint"), {"name": "mine", "expires_in": "1"}
        ).status_code
        == 403
    )
    assert JoinToken.objects.count() == 1
