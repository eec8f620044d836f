"""One sign-in policy for every password form: the portal's /login/ and Django admin's
/django-admin/login/ both call `authenticate()`, so both go through the one backend.

- django-axes locks an (account, client address) pair out after AXES_FAILURE_LIMIT wrong
  passwords for AXES_COOLOFF_TIME. The pair, never the account alone: a guesser elsewhere
  cannot lock a user out, only slow their own guessing down.
- An address has a much higher ceiling of failures, whatever accounts they tried
  (portal.ratelimit.LOGIN_FAILURES, PORTAL_SIGNIN_ADDRESS_CEILING in 5 minutes). Past it the
  address is slowed, not locked: the backend (portal.auth.PortalModelBackend) checks one
  password from it per PORTAL_SIGNIN_ADDRESS_PACE_S seconds and answers the rest 429 with
  that Retry-After. So one address cannot walk through many accounts quickly, and the people
  behind a shared NAT (or a proxy missing from PORTAL_TRUSTED_PROXIES) still sign in while
  someone among them guesses. The backend decides once per sign-in (an atomic take of the
  pace); a paced sign-in checks no password and counts as no failure, for the address or
  the account, so a right password is never recorded as wrong. A browser that signed in to
  an account before (its device cookie) is not paced with its address for that account:
  a guesser who keeps taking the address's pace does not keep its users out.
- Where the counts live: axes keeps its failures and locks in PostgreSQL (its database
  handler), so a pair's lock survives a restart of anything. The address ceiling is counted
  in Redis, which the portal runs without persistence, and a Redis restart resets it. It
  needn't survive: it only paces, and the guess budget that matters, five per account and
  address, is the one in PostgreSQL; a reset gives an address back at most one ceiling of
  unpaced checks, each still charged to its (account, address) pair.
- The client address is the peer that uvicorn reports; uvicorn takes it from
  X-Forwarded-For only when the peer is one of PORTAL_TRUSTED_PROXIES (`portal.serve`), so
  a made-up header never buys a fresh budget.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core import signing
from django.dispatch import receiver
from django.forms.utils import ErrorDict
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal import ratelimit
from portal.ratelimit import LOGIN_FAILURES, client_address


@receiver(user_login_failed, dispatch_uid="portal.signin.count_failure")
def count_failure(sender: Any, credentials: dict[str, Any], request: Any = None, **kw: Any) -> None:
    """Every failed password check, on any form, counts against the client's address; a
    sign-in paced before its password was checked is no failure."""
    if getattr(request, "signin_paced", False):
        return
    if request is not None and getattr(request, "META", {}).get("REMOTE_ADDR"):
        LOGIN_FAILURES.hit(client_address(request))


# --- known devices -----------------------------------------------------------------------
# A browser that signed in to an account before carries a signed cookie naming it (OWASP's
# "device cookies"): its sign-ins to that account are not paced with its address, so a
# guesser on the same address (a NAT, an office) slows only the browsers that never signed
# in there. The cookie names one account and proves nothing else: wrong passwords through
# it still count, and the (account, address) lockout still holds.
DEVICE_COOKIE = "portal_device"
DEVICE_SALT = "portal.signin.device"
DEVICE_MAX_AGE_S = 90 * 24 * 3600


def device_cookie(username: str) -> str:
    return signing.dumps(username, salt=DEVICE_SALT)


def known_device(request: Any, username: str | None) -> bool:
    """Whether the request's browser signed in to `username` before (its device cookie)."""
    raw = getattr(request, "COOKIES", {}).get(DEVICE_COOKIE)
    if not raw or not username:
        return False
    try:
        return bool(signing.loads(raw, salt=DEVICE_SALT, max_age=DEVICE_MAX_AGE_S) == username)
    except signing.BadSignature:
        return False


def remember_device(response: HttpResponse, username: str) -> None:
    response.set_cookie(
        DEVICE_COOKIE,
        device_cookie(username),
        max_age=DEVICE_MAX_AGE_S,
        httponly=True,
        secure=settings.SESSION_COOKIE_SECURE,
        samesite="Lax",
    )


def axes_client_ip(request: Any) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the client address, None where there is none (a request
    made up in-process, as the test client's login() makes)."""
    return getattr(request, "META", {}).get("REMOTE_ADDR") and client_address(request)


def lockout_response(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: 429 with the sign-in page's look and a Retry-After, for a
    locked (account, address) pair or an address paced (`paced_response`)."""
    if getattr(request, "signin_paced", False):
        return paced_response(request)
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    response = render(request, "auth/locked.html", {"minutes": max(1, seconds // 60)}, status=429)
    response["Retry-After"] = str(seconds)
    return response


def paced_response(request: HttpRequest) -> HttpResponse:
    """The sign-in form again, 429, saying how long the address waits (SIGNIN_PACE)."""
    form = AuthenticationForm(request)
    form.cleaned_data = {}
    form._errors = ErrorDict()  # type: ignore[attr-defined]  # Django's own, unstubbed
    wait = ratelimit.SIGNIN_PACE.retry_after()
    form.add_error(
        None,
        "Too many failed sign-in attempts from your address; "
        f"try again in {wait} second{'s' if wait != 1 else ''}.",
    )
    context = {"form": form, "next": request.POST.get("next", "")}
    response = render(request, "auth/login.html", context, status=429)
    response["Retry-After"] = str(wait)
    return response


class RateLimitedLoginView(auth_views.LoginView):
    """Django's LoginView that remembers the browser as a known device of the account it
    signed in to (its sign-ins there are not paced with its address). The pacing itself is
    the backend's, decided once per password check (portal.auth): a guess between a check
    here and the backend's can no longer turn a right password into a failure."""

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        remember_device(response, form.get_user().get_username())
        return response
