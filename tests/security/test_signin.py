"""One sign-in policy against the real server: Django admin's
form is limited like the portal's, failures are keyed on (account, address) so nobody can
lock a user out from elsewhere or from their own address, an address's much higher ceiling
slows it rather than locking everyone behind it out, a made-up X-Forwarded-For buys no
fresh budget, and bad bearer tokens never make a valid one from the same address wait."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from axes.models import AccessAttempt
from django.conf import settings

from portal.ratelimit import LOGIN_FAILURES, SIGNIN_PACE, TOKEN_FAILURES
from testbed import factories
from testbed.agents import wait_for
from testbed.processes import running, start_server
from tests.security.conftest import IP_PREFIX, bearer
from tests.support.ratelimits import room_in_window

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ADMIN_LOGIN = "/django-admin/login/"
PORTAL_LOGIN = "/login/"
ELSEWHERE = f"{IP_PREFIX}.250.1"  # another client: a loopback source address of our own


def sign_in(
    http: httpx.Client, path: str, username: str, password: str, device: str = "", **headers: str
):
    """One password attempt through the form, as a browser makes it (CSRF cookie and field);
    `device`: the known-device cookie the browser keeps from an earlier sign-in."""
    http.cookies.clear()
    if device:
        http.cookies.set("portal_device", device)
    page = http.get(path, headers=headers)
    assert page.status_code == 200, page.text[:300]
    form = {
        "username": username,
        "password": password,
        "csrfmiddlewaretoken": http.cookies["csrftoken"],
        "next": "/django-admin/" if path == ADMIN_LOGIN else "/",
    }
    return http.post(path, data=form, headers=headers)


def signed_in(resp) -> bool:
    return resp.status_code == 302 and "sessionid" in resp.cookies


def test_django_admins_form_stops_a_brute_force_and_counts_for_the_portals(http, operator):
    answers = [sign_in(http, ADMIN_LOGIN, "operator", f"guess-{i}").status_code for i in range(25)]
    limit = settings.AXES_FAILURE_LIMIT
    assert answers[: limit - 1] == [200] * (limit - 1)  # the form again, "wrong password"
    assert set(answers[limit:]) == {429}, answers
    right = operator.raw_password
    locked = sign_in(http, ADMIN_LOGIN, "operator", right)
    assert locked.status_code == 429 and not signed_in(locked)
    assert "Sign-in paused" in locked.text and int(locked.headers["Retry-After"]) > 0
    # One policy: the portal's own form is locked for this account and address too.
    assert sign_in(http, PORTAL_LOGIN, "operator", right).status_code == 429


def test_nobody_can_lock_a_user_out_from_elsewhere(http, server, tenant_a):
    for i in range(30):
        sign_in(http, PORTAL_LOGIN, "alice", f"guess-{i}")
    assert sign_in(http, PORTAL_LOGIN, "alice", tenant_a.raw_password).status_code == 429
    transport = httpx.HTTPTransport(local_address=ELSEWHERE)
    with httpx.Client(base_url=server.url, transport=transport, timeout=30) as victim:
        assert signed_in(sign_in(victim, PORTAL_LOGIN, "alice", tenant_a.raw_password))
    LOGIN_FAILURES.reset(ELSEWHERE)


def test_a_bystander_on_the_same_address_is_not_locked_out_by_anothers_failures(
    http, tenant_a, tenant_b
):
    # Twenty wrong passwords for alice, from an address others share (a NAT, an office).
    answers = [sign_in(http, PORTAL_LOGIN, "alice", f"guess-{i}").status_code for i in range(20)]
    assert answers.count(429) >= 20 - settings.AXES_FAILURE_LIMIT  # alice's pair is paused
    assert sign_in(http, PORTAL_LOGIN, "alice", tenant_a.raw_password).status_code == 429
    # bob, behind the same address, signs in at once, on either form.
    assert signed_in(sign_in(http, PORTAL_LOGIN, "bob", tenant_b.raw_password))
    assert sign_in(http, ADMIN_LOGIN, "bob", tenant_b.raw_password).status_code in (200, 302)


@pytest.fixture
def low_ceiling(transactional_db) -> Iterator[str]:
    """A web process whose address ceiling is 6 failures, paced at one check per 2 s."""
    proc, url = start_server(PORTAL_SIGNIN_ADDRESS_CEILING="6", PORTAL_SIGNIN_ADDRESS_PACE_S="2")
    for limit in (LOGIN_FAILURES, SIGNIN_PACE):
        limit.reset("127.0.0.1")
    room_in_window(LOGIN_FAILURES)
    with running(proc):
        yield url
    for limit in (LOGIN_FAILURES, SIGNIN_PACE):
        limit.reset("127.0.0.1")


def test_past_the_address_ceiling_sign_in_is_slowed_not_locked(low_ceiling, tenant_b):
    with httpx.Client(base_url=low_ceiling, timeout=30) as http:
        for i in range(6):  # six accounts, one wrong password each: under every pair's lock
            assert sign_in(http, PORTAL_LOGIN, f"nobody-{i}", "x").status_code == 200
        # Over the ceiling: one password check per pace. This one is checked (and wrong) ...
        assert sign_in(http, PORTAL_LOGIN, "nobody-x", "x").status_code == 200
        # ... and the next right after it waits, told for how long.
        paced = sign_in(http, PORTAL_LOGIN, "bob", tenant_b.raw_password)
        assert paced.status_code == 429 and not signed_in(paced)
        assert paced.headers["Retry-After"] == "2"
        assert "try again in 2 seconds" in paced.text
        time.sleep(2.1)  # what Retry-After said; a person clicks again
        assert signed_in(sign_in(http, PORTAL_LOGIN, "bob", tenant_b.raw_password))


def test_a_made_up_forwarded_for_buys_no_fresh_budget(http, tenant_a):
    def spoofed() -> dict[str, str]:
        return {"X-Forwarded-For": f"198.51.100.{uuid.uuid4().int % 250 + 1}"}

    for i in range(settings.AXES_FAILURE_LIMIT):
        sign_in(http, PORTAL_LOGIN, "alice", f"guess-{i}", **spoofed())
    assert (
        sign_in(http, PORTAL_LOGIN, "alice", tenant_a.raw_password, **spoofed()).status_code == 429
    )
    # The per-address ceiling, across accounts, is not reset by the header either: past it
    # the address is paced, one password check per interval, whatever the header says.
    for i in range(LOGIN_FAILURES.limit + 1):
        sign_in(http, PORTAL_LOGIN, f"nobody-{i}", "x", **spoofed())
    carol = factories.make_user("carol")
    assert sign_in(http, PORTAL_LOGIN, "carol", carol.raw_password, **spoofed()).status_code == 429
    SIGNIN_PACE.reset("127.0.0.1")


@pytest.fixture
def behind_a_proxy(transactional_db) -> Iterator[str]:
    """A web process behind a reverse proxy at 127.0.0.1 (PORTAL_TRUSTED_PROXIES)."""
    proc, url = start_server(PORTAL_TRUSTED_PROXIES="127.0.0.1")
    with running(proc):
        yield url


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(behind_a_proxy, tenant_a):
    LOGIN_FAILURES.reset("127.0.0.1")
    attacker, user = {"X-Forwarded-For": "203.0.113.7"}, {"X-Forwarded-For": "203.0.113.8"}
    with httpx.Client(base_url=behind_a_proxy, timeout=30) as proxy:
        for i in range(settings.AXES_FAILURE_LIMIT):
            sign_in(proxy, PORTAL_LOGIN, "alice", f"guess-{i}", **attacker)
        right = tenant_a.raw_password
        assert sign_in(proxy, PORTAL_LOGIN, "alice", right, **attacker).status_code == 429
        assert signed_in(sign_in(proxy, PORTAL_LOGIN, "alice", right, **user))
    LOGIN_FAILURES.reset("203.0.113.7")


def test_bad_tokens_never_make_a_valid_token_from_the_same_address_wait(http, tenant_a):
    answers = {
        http.get("/api/v1/racks/", headers={"Authorization": f"Bearer dpt_{i:06d}x"}).status_code
        for i in range(TOKEN_FAILURES.limit + 5)
    }
    assert answers == {401, 429}
    assert http.get("/api/v1/racks/", headers=bearer(tenant_a)).status_code == 200
    TOKEN_FAILURES.reset("127.0.0.1")


def test_a_right_password_is_never_a_failure_and_a_known_browser_gets_in(low_ceiling, tenant_b):
    """While a guesser on the same address keeps taking the address's pace: the browser bob
    signed in with before gets in every time, and a right password from a browser that
    never signed in waits (429), but is never answered or recorded as wrong."""
    carol = factories.make_user("carol")
    with httpx.Client(base_url=low_ceiling, timeout=30) as bobs:
        assert signed_in(sign_in(bobs, PORTAL_LOGIN, "bob", tenant_b.raw_password))
        device = bobs.cookies["portal_device"]  # his browser is known now
        stop = threading.Event()
        guesser = threading.Thread(target=guess_until, args=(low_ceiling, stop), daemon=True)
        guesser.start()
        try:
            wait_for_pacing(low_ceiling)
            bob_answers, carol_answers = [], []
            for _ in range(10):
                bob_answers.append(
                    sign_in(bobs, PORTAL_LOGIN, "bob", tenant_b.raw_password, device=device)
                )
                with httpx.Client(base_url=low_ceiling, timeout=30) as fresh:
                    carol_answers.append(
                        sign_in(fresh, PORTAL_LOGIN, "carol", carol.raw_password).status_code
                    )
        finally:
            stop.set()
            guesser.join()
    assert all(signed_in(a) for a in bob_answers)
    assert set(carol_answers) <= {302, 429} and 429 in carol_answers
    failed = AccessAttempt.objects.filter(username__in=["bob", "carol"])
    assert sum(failed.values_list("failures_since_start", flat=True)) == 0


def guess_until(url: str, stop: threading.Event) -> None:
    """Wrong passwords for one account after another, as fast as the server answers."""
    with httpx.Client(base_url=url, timeout=30) as guesser:
        i = 0
        while not stop.is_set():
            sign_in(guesser, PORTAL_LOGIN, f"nobody-{i % 50}", "guess")
            i += 1


def wait_for_pacing(url: str) -> None:
    """Until the guesser has taken the address over its ceiling (low_ceiling's 6)."""
    wait_for(lambda: LOGIN_FAILURES.count("127.0.0.1") >= 8, 30, "the guesser over the ceiling")
