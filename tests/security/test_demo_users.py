"""Demo users are inert with DEBUG off (issue 16, finding 4): no password, no session, no
API token. The real server runs with DEBUG off, as production does."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from domains.tenancy.seed import DEMO_PASSWORD, build_demo_tenants
from tests import factories
from tests.security.conftest import bearer

pytestmark = pytest.mark.django_db


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_demo_users_token_is_refused_with_debug_off(http):
    build_demo_tenants()
    from django.contrib.auth.models import User

    alice = User.objects.get(username="alice")
    resp = http.get("/api/v1/namespaces/", headers=bearer(alice))
    assert resp.status_code == 401, resp.text
    assert resp.json()["code"] == "authentication_failed"
    # Nor does the well-known password open a session.
    page = http.get("/login/")
    csrf = page.cookies["csrftoken"]
    signed = http.post(
        "/login/",
        data={"username": "alice", "password": DEMO_PASSWORD, "csrfmiddlewaretoken": csrf},
    )
    assert signed.status_code == 200 and "sessionid" not in signed.cookies
    # Anyone else's token works as always.
    carol = factories.make_user("carol")
    assert http.get("/api/v1/namespaces/", headers=bearer(carol)).status_code == 200


def test_a_demo_users_token_works_in_debug(settings):
    settings.DEBUG = True
    build_demo_tenants()
    from django.contrib.auth.models import User

    client = APIClient()
    client.credentials(
        **{"HTTP_AUTHORIZATION": bearer(User.objects.get(username="bob"))["Authorization"]}
    )
    assert client.get("/api/v1/namespaces/").status_code == 200
