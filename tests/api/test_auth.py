"""Authentication: personal bearer tokens (hashed, expiring, read-only, last-used), the
browser session with CSRF, sign-in rate limits, `create_token`, and deploy checks."""

from __future__ import annotations

import io
import os
import subprocess
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from domains.audit.events import SYSTEM
from domains.audit.models import Event
from domains.security import hash_token
from domains.tenancy.models import ApiToken
from domains.tenancy.tokens import token_authenticate, token_create, token_revoke
from portal import ratelimit
from portal.ratelimit import (
    LOGIN_FAILURES,
    TOKEN_FAILURES,
    TOKEN_PREFIX_FAILURES,
)
from portal.serve import uvicorn_args
from testbed.processes import ROOT, VENV_BIN
from tests.api.conftest import bearer_client
from tests.support.ratelimits import room_in_window
from tests.support.staticfiles import collected_static

RACKS = "/api/v1/racks/"


def fresh_address() -> str:
    """A client address no other test has used, so rate-limit windows don't mix."""
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def test_tokens_are_stored_only_as_hashes(tenant_a) -> None:
    token, raw = token_create(actor=SYSTEM, user=tenant_a, name="ci")
    assert raw.startswith("dpt_") and len(raw) > 40
    assert token.token_hash == hash_token(raw) and raw not in token.token_hash
    assert token.prefix == raw[:10]
    assert not ApiToken.objects.filter(token_hash=raw).exists()
    assert Event.objects.filter(verb="token.created").count() == 1
    assert raw not in str(Event.objects.get(verb="token.created").__dict__)


def test_a_user_may_hold_several_tokens_and_each_works(tenant_a) -> None:
    first, second = bearer_client(tenant_a), bearer_client(tenant_a)
    assert first.get(RACKS).status_code == second.get(RACKS).status_code == 200
    assert tenant_a.api_tokens.count() == 2


def test_the_token_list_never_shows_secrets_or_other_users_tokens(tenant_a, tenant_b) -> None:
    client = bearer_client(tenant_a)
    bearer_client(tenant_b)
    listed = client.get("/api/v1/tokens/").json()["results"]
    assert len(listed) == 1
    assert set(listed[0]) == {
        "id",
        "name",
        "prefix",
        "readOnly",
        "expiresAt",
        "lastUsedAt",
        "createdAt",
        "parentId",
    }


def test_creating_a_token_over_the_api_shows_the_secret_once(tenant_a) -> None:
    client = bearer_client(tenant_a)
    body = {"name": "nightly", "readOnly": True, "expiresInDays": 30}
    created = client.post("/api/v1/tokens/", body, format="json").json()
    assert created["token"].startswith("dpt_") and created["readOnly"] is True
    expires = timezone.datetime.fromisoformat(created["expiresAt"])
    assert abs(expires - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    fresh = APIClient()
    fresh.credentials(HTTP_AUTHORIZATION=f"Bearer {created['token']}")
    assert fresh.get(RACKS).status_code == 200
    assert "token" not in client.get("/api/v1/tokens/").json()["results"][0]


def test_read_only_tokens_only_read(tenant_a, ns_a) -> None:
    client = bearer_client(tenant_a, read_only=True)
    assert client.get(RACKS).status_code == 200
    response = client.post("/api/v1/tokens/", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert response.json() == {"code": "forbidden", "message": "This API token is read-only."}


def test_expired_and_revoked_tokens_are_refused(tenant_a) -> None:
    expired, raw_expired = token_create(
        actor=SYSTEM, user=tenant_a, name="old", expires_in=timedelta(days=1)
    )
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(1))
    revoked, raw_revoked = token_create(actor=SYSTEM, user=tenant_a, name="gone")
    token_revoke(actor=SYSTEM, token=revoked)
    for raw in (raw_expired, raw_revoked):
        client = APIClient(REMOTE_ADDR=fresh_address())
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        response = client.get(RACKS)
        assert response.status_code == 401
        assert response.json()["code"] == "authentication_failed"
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_revoking_over_the_api_stops_the_token(tenant_a) -> None:
    client = bearer_client(tenant_a)
    own = tenant_a.api_tokens.get()
    assert client.delete(f"/api/v1/tokens/{own.pk}/").status_code == 204
    assert client.get(RACKS).status_code == 401
    own.refresh_from_db()
    assert own.revoked_at is not None


def test_an_inactive_users_tokens_stop_working(tenant_a) -> None:
    client = bearer_client(tenant_a)
    tenant_a.is_active = False
    tenant_a.save()
    assert client.get(RACKS).status_code == 401


def test_last_used_time_is_recorded_at_most_once_a_minute(tenant_a) -> None:
    token, raw = token_create(actor=SYSTEM, user=tenant_a, name="ci")
    assert token.last_used_at is None
    first = token_authenticate(raw).last_used_at
    assert first is not None
    assert token_authenticate(raw).last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    assert token_authenticate(raw).last_used_at > first - timedelta(minutes=2)


@pytest.mark.parametrize(
    "header", ["Bearer", "Bearer a b", "Bearer dpt_nope", "Bearer ñ", "Bearer not-ours"]
)
def test_malformed_or_unknown_bearer_tokens_are_401(db, header) -> None:
    client = APIClient(REMOTE_ADDR=fresh_address())
    response = client.get(RACKS, HTTP_AUTHORIZATION=header.encode().decode("latin-1"))
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


def test_no_credentials_is_401_with_a_bearer_challenge(db) -> None:
    response = APIClient().get(RACKS)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_retrying_a_bad_token_is_rate_limited_but_valid_tokens_never_are(tenant_a) -> None:
    address = fresh_address()
    room_in_window(TOKEN_FAILURES, TOKEN_PREFIX_FAILURES)
    guesser = APIClient(REMOTE_ADDR=address)
    guesser.credentials(HTTP_AUTHORIZATION="Bearer dpt_guess")
    for _ in range(TOKEN_PREFIX_FAILURES.limit):
        assert guesser.get(RACKS).status_code == 401
    blocked = guesser.get(RACKS)
    assert blocked.status_code == 429
    assert blocked.json()["code"] == "throttled"
    assert int(blocked["Retry-After"]) >= 1
    # A valid token from the same address works: only failures are ever refused.
    _, raw = token_create(actor=SYSTEM, user=tenant_a, name="ci")
    same = APIClient(REMOTE_ADDR=address)
    same.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert same.get(RACKS).status_code == 200
    TOKEN_FAILURES.reset(address)
    TOKEN_PREFIX_FAILURES.reset(f"{address}|dpt_guess")


def test_browser_sessions_need_csrf_for_writes(tenant_a) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(tenant_a)
    assert client.get(RACKS).status_code == 200
    refused = client.post("/api/v1/tokens/", {"name": "x"}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["message"]
    client.get("/login/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    accepted = client.post("/api/v1/tokens/", {"name": "x"}, format="json", HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 201


def test_web_sign_in_is_paced_per_address_past_its_ceiling(tenant_a, monkeypatch) -> None:
    # A pace no slow machine outlasts while the test makes its failures (the real one is 2 s).
    pace = ratelimit.Pace(scope=f"signin-test-{uuid.uuid4().hex[:8]}", interval_s=60)
    monkeypatch.setattr(ratelimit, "SIGNIN_PACE", pace)
    address = fresh_address()
    room_in_window(LOGIN_FAILURES)
    browser = Client(REMOTE_ADDR=address)
    for i in range(LOGIN_FAILURES.limit + 1):  # other accounts each time: the address counts
        response = browser.post("/login/", {"username": f"guess{i}", "password": "wrong"})
        assert response.status_code == 200
    paced = browser.post("/login/", {"username": "alice", "password": tenant_a.raw_password})
    assert paced.status_code == 429
    assert int(paced["Retry-After"]) == pace.retry_after() == 60
    assert b"Too many failed sign-in attempts" in paced.content
    assert "_auth_user_id" not in browser.session
    elsewhere = Client(REMOTE_ADDR=fresh_address())
    ok = elsewhere.post("/login/", {"username": "alice", "password": tenant_a.raw_password})
    assert ok.status_code == 302
    pace.reset(address)  # the pace has passed: the next check goes through
    ok = browser.post("/login/", {"username": "alice", "password": tenant_a.raw_password})
    assert ok.status_code == 302
    LOGIN_FAILURES.reset(address)
    pace.reset(address)


BAD_TOKEN_INPUT = [
    ("name", {}),
    ("name", {"name": ""}),
    ("name", {"name": "   "}),
    ("name", {"name": "x" * 101}),
    ("name", {"name": 5}),
    ("readOnly", {"name": "a", "readOnly": "yes"}),
    ("readOnly", {"name": "a", "readOnly": 1}),
    ("expiresInDays", {"name": "a", "expiresInDays": 0}),
    ("expiresInDays", {"name": "a", "expiresInDays": 3651}),
    ("expiresInDays", {"name": "a", "expiresInDays": "soon"}),
    ("scopes", {"name": "a", "scopes": ["all"]}),
]


@pytest.mark.parametrize(("field", "body"), BAD_TOKEN_INPUT)
def test_bad_token_input_is_a_400_naming_the_field(tenant_a, field, body) -> None:
    client = bearer_client(tenant_a)
    response = client.post("/api/v1/tokens/", body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == field
    assert tenant_a.api_tokens.count() == 1


def test_create_token_command_prints_a_working_token(tenant_a) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "create_token", "alice", "--read-only", "--expires-in", "7", stdout=out, stderr=err
    )
    raw = out.getvalue().strip()
    token = token_authenticate(raw)
    assert token is not None and token.user == tenant_a and token.read_only
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert "read-only" in err.getvalue() and raw not in err.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [(["nobody"], "no user named"), (["alice", "--expires-in", "0"], "positive")],
)
def test_create_token_command_refuses_bad_arguments(tenant_a, args, message) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("create_token", *args, stdout=io.StringIO(), stderr=io.StringIO())


def test_deploy_checks_pass_with_production_settings() -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PORTAL_TESTING", "DEBUG", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        {
            "DEBUG": "0",
            "SECRET_KEY": "deploy-check-" + uuid.uuid4().hex * 2,
            "ALLOWED_HOSTS": "portal.example.com",
            "CSRF_TRUSTED_ORIGINS": "https://portal.example.com",
            "STATIC_ROOT": collected_static(),  # as the image has them
        }
    )
    result = subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_guesses_from_many_addresses_never_lock_the_account_out(tenant_a, settings) -> None:
    from testbed import factories

    victim = factories.make_user(f"victim-{uuid.uuid4().hex[:8]}")
    for _ in range(settings.AXES_FAILURE_LIMIT * 3):
        guess = Client(REMOTE_ADDR=fresh_address())
        assert guess.post("/login/", {"username": victim.username, "password": "x"}).status_code
    right = {"username": victim.username, "password": victim.raw_password}
    assert Client(REMOTE_ADDR=fresh_address()).post("/login/", right).status_code == 302


def test_guesses_from_one_address_lock_that_account_there_only(db, settings) -> None:
    from testbed import factories

    victim = factories.make_user(f"victim-{uuid.uuid4().hex[:8]}")
    guesser = Client(REMOTE_ADDR=fresh_address())
    for _ in range(settings.AXES_FAILURE_LIMIT):
        guesser.post("/login/", {"username": victim.username, "password": "x"})
    right = {"username": victim.username, "password": victim.raw_password}
    locked = guesser.post("/login/", right)
    assert locked.status_code == 429 and b"Sign-in paused" in locked.content
    assert int(locked["Retry-After"]) == int(settings.AXES_COOLOFF_TIME.total_seconds())
    assert Client(REMOTE_ADDR=fresh_address()).post("/login/", right).status_code == 302


def test_uvicorn_believes_proxy_headers_only_from_the_trusted_proxies() -> None:
    app = ["portal.asgi:application", "--port", "8000"]
    assert uvicorn_args(app, "") == ["--no-proxy-headers", *app]
    assert uvicorn_args(app, " 10.0.0.0/8, 192.0.2.1 ") == [
        "--proxy-headers",
        "--forwarded-allow-ips",
        "10.0.0.0/8,192.0.2.1",
        *app,
    ]
    with pytest.raises(SystemExit, match="PORTAL_TRUSTED_PROXIES"):
        uvicorn_args([*app, "--forwarded-allow-ips=*"], "")


def test_with_redis_away_the_token_limit_counts_locally_and_never_errors(
    tenant_a, settings, caplog, monkeypatch
) -> None:
    """docs/reliability.md: the limiter degrades to a per-process count (logged once),
    never to a 500, and asks Redis again after REDIS_RETRY_S."""
    import portal.ratelimit as ratelimit

    monkeypatch.setattr(ratelimit, "_backend", ratelimit._Backend())
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nobody listens on port 1
        }
    }
    _, raw = token_create(actor=SYSTEM, user=tenant_a, name="ci")
    good = APIClient(REMOTE_ADDR=fresh_address())
    good.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    with caplog.at_level("WARNING", logger="portal.ratelimit"):
        assert good.get(RACKS).status_code == 200
        address = fresh_address()
        guesser = APIClient(REMOTE_ADDR=address)
        guesser.credentials(HTTP_AUTHORIZATION="Bearer dpt_guess")
        for _ in range(TOKEN_PREFIX_FAILURES.limit):
            assert guesser.get(RACKS).status_code == 401
        assert guesser.get(RACKS).status_code == 429  # the brake still holds, locally
        assert good.get(RACKS).status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.name == "portal.ratelimit"]
    assert len(warnings) == 1 and "unreachable" in warnings[0]

    # Redis answers again (the real one): after the retry interval the limiter goes back.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.REDIS_URL,
        }
    }
    monkeypatch.setattr(ratelimit._backend, "_away_until", 0.0)
    with caplog.at_level("WARNING", logger="portal.ratelimit"):
        assert good.get(RACKS).status_code == 200  # a valid token never asks the limiter
        other = APIClient(REMOTE_ADDR=fresh_address())
        other.credentials(HTTP_AUTHORIZATION="Bearer dpt_other")
        assert other.get(RACKS).status_code == 401
    messages = [r.getMessage() for r in caplog.records if r.name == "portal.ratelimit"]
    assert "answers again" in messages[-1]
    assert TOKEN_FAILURES.count(address) == 0  # local counts are not carried over
