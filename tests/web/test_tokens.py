"""Personal API tokens in the browser: created once-visible, listed by prefix, revoked, and
never anyone else's."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from domains.audit.models import Event
from domains.tenancy.models import ApiToken

pytestmark = pytest.mark.django_db


def test_a_user_creates_a_token_sees_it_once_and_it_works_on_the_api(client, tenant_a):
    client.force_login(tenant_a)
    created = client.post(
        reverse("tokens"), {"name": "ci-pipeline", "read_only": "on", "expires_in_days": "30"}
    )
    assert created.status_code == 302 and created["Location"] == reverse("tokens")
    page = client.get(created["Location"])  # reloading it would not mint a second token
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    raw = page.context["created"]["raw"]
    assert raw.startswith("dpt_") and raw in page.content.decode()
    token = ApiToken.objects.get(user=tenant_a)
    assert token.read_only and token.expires_at is not None and token.token_hash != raw

    listing = client.get(reverse("tokens")).content.decode()
    assert "ci-pipeline" in listing and token.prefix in listing and raw not in listing
    assert ApiToken.objects.filter(user=tenant_a).count() == 1  # shown once, minted once

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/namespaces/").status_code == 200


@pytest.mark.parametrize(
    ("data", "field"),
    [({"name": ""}, "name"), ({"name": "x", "expires_in_days": "0"}, "expires_in_days")],
)
def test_bad_input_names_the_field_and_creates_nothing(client, tenant_a, data, field):
    client.force_login(tenant_a)
    page = client.post(reverse("tokens"), data)
    assert page.status_code == 200 and page.context["form"].errors[field]
    assert not ApiToken.objects.exists()


def test_revoking_stops_the_token_and_is_audited(client, tenant_a):
    client.force_login(tenant_a)
    raw = client.post(reverse("tokens"), {"name": "old"}, follow=True).context["created"]["raw"]
    token = ApiToken.objects.get(user=tenant_a)
    response = client.post(reverse("token_revoke", args=[token.pk]))
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert Event.objects.filter(verb="token.revoked").exists()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/namespaces/").status_code == 401


def test_nobody_sees_or_revokes_anothers_token(client, tenant_a, tenant_b):
    client.force_login(tenant_a)
    client.post(reverse("tokens"), {"name": "alices"})
    token = ApiToken.objects.get(user=tenant_a)
    client.force_login(tenant_b)
    assert "alices" not in client.get(reverse("tokens")).content.decode()
    assert client.post(reverse("token_revoke", args=[token.pk])).status_code == 404
    assert client.get(reverse("token_revoke", args=[token.pk])).status_code == 405
    token.refresh_from_db()
    assert token.revoked_at is None


def test_anonymous_users_are_sent_to_log_in(client):
    response = client.get(reverse("tokens"))
    assert response.status_code == 302 and reverse("login") in response["Location"]
