"""The sign-in page names the demo's logins while DEBUG is on, the only time they work, and
never with DEBUG off."""

from __future__ import annotations

import pytest
from django.test import Client

from domains.tenancy.seed import DEMO_PASSWORD, build_demo_tenants

pytestmark = pytest.mark.django_db


def test_with_debug_on_the_sign_in_page_lists_the_demo_logins(settings):
    settings.DEBUG = True
    build_demo_tenants()
    page = Client().get("/login/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "Demo logins" in body and f"<code>{DEMO_PASSWORD}</code>" in body
    for username in ("operator", "admin", "alice", "bob"):
        assert f"<code>{username}</code>" in body
    assert Client().login(username="alice", password=DEMO_PASSWORD)  # and they do work


def test_with_debug_off_the_sign_in_page_never_names_them(settings):
    settings.DEBUG = False
    build_demo_tenants()
    body = Client().get("/login/", secure=True).content.decode()
    assert "Demo logins" not in body and "<code>alice</code>" not in body
    assert not Client().login(username="alice", password=DEMO_PASSWORD)  # refused, as said


def test_with_debug_on_but_no_demo_seeded_it_lists_nobody(settings):
    settings.DEBUG = True
    body = Client().get("/login/").content.decode()
    assert "Demo logins" not in body
