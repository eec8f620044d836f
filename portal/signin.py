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
  someone among them guesses.
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

from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.ratelimit import LOGIN_FAILURES, client_address


@receiver(user_login_failed, dispatch_uid="portal.signin.count_failure")
def count_failure(sender: Any, credentials: dict[str, Any], request: Any = None, **kw: Any) -> None:
    """Every failed password check, on any form, counts against the client's address."""
    if request is not None and getattr(request, "META", {}).get("REMOTE_ADDR"):
        LOGIN_FAILURES.hit(client_address(request))


def axes_client_ip(request: Any) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the client address, None where there is none (a request
    made up in-process, as the test client's login() makes)."""
    return getattr(request, "META", {}).get("REMOTE_ADDR") and client_address(request)


def lockout_response(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: 429 with the sign-in page's look and a Retry-After."""
    from django.conf import settings

    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    response = render(request, "auth/locked.html", {"minutes": max(1, seconds // 60)}, status=429)
    response["Retry-After"] = str(seconds)
    return response
