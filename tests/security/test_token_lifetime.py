"""A token never outlives the token that minted it. A short-lived or read-only token used
to mint tokens with no expiry or write access, which kept working after their parent
expired or was revoked; now a child's expiry is capped at its parent's, it is read-only if
the parent is, and revoking the parent revokes its children and theirs."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone
from rest_framework.test import APIClient

from domains.audit.events import SYSTEM
from domains.audit.models import Event
from domains.errors import InvalidInput
from domains.tenancy.models import ApiToken
from domains.tenancy.tokens import token_create, token_revoke

pytestmark = pytest.mark.django_db
RACKS = "/api/v1/racks/"


def client_with(raw: str) -> APIClient:
    address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def mint(raw: str, **body) -> dict:
    response = client_with(raw).post("/api/v1/tokens/", {"name": "child", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_token_minted_by_a_day_long_token_expires_with_it(tenant_a):
    parent, raw = token_create(
        actor=SYSTEM, user=tenant_a, name="short", expires_in=timedelta(days=1)
    )
    for body in ({}, {"expiresInDays": None}, {"expiresInDays": 3650}):
        child = mint(raw, **body)
        assert child["parentId"] == parent.pk
        assert child["expiresAt"] is not None
        row = ApiToken.objects.get(pk=child["id"])
        assert row.expires_at == parent.expires_at
    shorter = ApiToken.objects.get(pk=mint(raw, expiresInDays=1)["id"])
    assert shorter.expires_at <= parent.expires_at


def test_a_child_stops_working_when_its_parent_expires(tenant_a):
    _, raw = token_create(actor=SYSTEM, user=tenant_a, name="short", expires_in=timedelta(days=1))
    child = mint(raw)
    assert client_with(child["token"]).get(RACKS).status_code == 200
    # Two days pass (both expiry times move back together, as the clock would move on).
    ApiToken.objects.update(expires_at=F("expires_at") - timedelta(days=2))
    assert client_with(raw).get(RACKS).status_code == 401
    assert client_with(child["token"]).get(RACKS).status_code == 401


def test_a_child_is_refused_however_its_parent_was_revoked(tenant_a):
    parent, raw = token_create(actor=SYSTEM, user=tenant_a, name="laptop")
    child = mint(raw)
    ApiToken.objects.filter(pk=parent.pk).update(revoked_at=timezone.now())  # not the service
    assert client_with(child["token"]).get(RACKS).status_code == 401


def test_revoking_a_token_revokes_its_children_and_theirs(tenant_a):
    parent, raw = token_create(actor=SYSTEM, user=tenant_a, name="laptop")
    child = mint(raw)
    grandchild = mint(child["token"])
    assert grandchild["parentId"] == child["id"]
    _, unrelated_raw = token_create(actor=SYSTEM, user=tenant_a, name="other")

    response = client_with(unrelated_raw).delete(f"/api/v1/tokens/{parent.pk}/")
    assert response.status_code == 204
    for raw_secret in (raw, child["token"], grandchild["token"]):
        assert client_with(raw_secret).get(RACKS).status_code == 401
    assert client_with(unrelated_raw).get(RACKS).status_code == 200
    revoked = Event.objects.filter(verb="token.revoked").values_list("object_id", flat=True)
    assert sorted(revoked) == sorted(str(pk) for pk in (parent.pk, child["id"], grandchild["id"]))


def test_a_read_only_parent_mints_only_read_only_children(tenant_a):
    parent, _ = token_create(actor=SYSTEM, user=tenant_a, name="ro", read_only=True)
    child, _ = token_create(actor=SYSTEM, user=tenant_a, name="child", parent=parent)
    assert child.read_only


def test_a_revoked_or_expired_parent_mints_nothing(tenant_a):
    revoked, _ = token_create(actor=SYSTEM, user=tenant_a, name="gone")
    token_revoke(actor=SYSTEM, token=revoked)
    expired, _ = token_create(actor=SYSTEM, user=tenant_a, name="old", expires_in=timedelta(1))
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(1))
    for parent in (revoked, expired):
        with pytest.raises(InvalidInput) as refused:
            token_create(actor=SYSTEM, user=tenant_a, name="child", parent=parent)
        assert refused.value.field == "token"
    assert ApiToken.objects.count() == 2


def test_a_browser_session_mints_a_token_with_no_parent(tenant_a, client):
    client.force_login(tenant_a)
    response = client.post(
        "/api/v1/tokens/",
        {"name": "from the browser"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["parentId"] is None and response.json()["expiresAt"] is None
