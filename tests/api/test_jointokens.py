"""`/api/v1/jointokens/`: portal admins list, mint and revoke the fleet's join tokens through
the same services as the Django admin and `manage.py join_token`; nobody else sees them."""

from __future__ import annotations

import pytest

from domains.agents.jointokens import join_token_create
from domains.agents.models import JoinToken
from domains.audit.events import SYSTEM
from domains.audit.models import Event
from domains.security import hash_token

pytestmark = pytest.mark.django_db
URL = "/api/v1/jointokens/"


@pytest.fixture
def token(db):
    row, _ = join_token_create(actor=SYSTEM, name="rack 7", max_uses=18)
    return row


@pytest.mark.parametrize(
    ("role", "expected"),
    [("anonymous", 401), ("other_tenant", 403), ("member", 403), ("operator", 403)],
)
def test_only_portal_admins_see_or_mint_join_tokens(clients, token, role, expected):
    client = clients[role]
    assert client.get(URL).status_code == expected
    assert client.get(f"{URL}{token.pk}/").status_code == expected
    assert client.post(URL, {"name": "mine"}, format="json").status_code == expected
    assert client.delete(f"{URL}{token.pk}/").status_code == expected
    assert JoinToken.objects.count() == 1
    token.refresh_from_db()
    assert token.revoked_at is None


def test_an_admin_lists_join_tokens_without_their_secrets(clients, token):
    answer = clients["admin"].get(URL)
    assert answer.status_code == 200
    (row,) = answer.json()["results"]
    assert (row["name"], row["state"], row["uses"], row["maxUses"]) == ("rack 7", "usable", 0, 18)
    assert "token" not in row and token.token_hash not in answer.content.decode()


def test_an_admin_mints_a_join_token_and_sees_its_secret_once(clients, admin):
    answer = clients["admin"].post(
        URL, {"name": "rack 8", "expiresInHours": 48, "maxUses": 18}, format="json"
    )
    assert answer.status_code == 201, answer.content
    assert answer["Cache-Control"] == "no-store"
    body = answer.json()
    raw = body["token"]
    row = JoinToken.objects.get(token_hash=hash_token(raw))
    assert (row.name, row.max_uses, row.created_by) == ("rack 8", 18, admin)
    assert body["createdBy"] == "admin" and body["state"] == "usable"
    assert raw not in clients["admin"].get(f"{URL}{row.pk}/").content.decode()
    assert Event.objects.filter(verb="join_token.created", actor_name="admin").exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x", "maxUses": 0}, "maxUses"),
        ({"name": "x", "expiresInHours": "24"}, "expiresInHours"),
        ({"name": "x", "expiresInHours": 24 * 366}, "expiresInHours"),
        ({"name": "x", "uses": 3}, "uses"),
    ],
)
def test_a_bad_join_token_request_is_refused_naming_the_field(clients, body, field):
    answer = clients["admin"].post(URL, body, format="json")
    assert answer.status_code == 400
    assert answer.json()["field"] == field
    assert not JoinToken.objects.exists()


def test_an_admin_revokes_a_join_token_once(clients, token):
    assert clients["admin"].delete(f"{URL}{token.pk}/").status_code == 204
    token.refresh_from_db()
    assert token.revoked_at is not None
    again = clients["admin"].delete(f"{URL}{token.pk}/")
    assert (again.status_code, again.json()["code"]) == (409, "invalid_transition")
    assert clients["admin"].delete(f"{URL}{token.pk + 1000}/").status_code == 404
    assert Event.objects.filter(verb="join_token.revoked").count() == 1
