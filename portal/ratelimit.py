"""Small fixed-window rate limits kept in the shared cache (Redis), so every web process
counts together and a restart does not reset an attacker's budget.

Used for sign-in: failed password logins (web form) and failed bearer tokens (API) are
counted per client address; once a key is over its limit, further attempts are refused
until the window rolls over, without even checking the password or token.

    from portal.ratelimit import LOGIN_FAILURES
    if LOGIN_FAILURES.exceeded(key): refuse(retry_after=LOGIN_FAILURES.retry_after())
    ...
    LOGIN_FAILURES.hit(key)   # after a failure

Fixed windows let a burst of twice the limit straddle a boundary; for a sign-in brake that is
fine and costs one cache key per client per window.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.forms.utils import ErrorDict
from django.http import HttpRequest, HttpResponse


@dataclass(frozen=True)
class RateLimit:
    """At most `limit` hits per `window_s` seconds per key, in the scope `scope`."""

    scope: str
    limit: int
    window_s: int

    def _key(self, key: str, now: float | None = None) -> str:
        window = int((time.time() if now is None else now) // self.window_s)
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        return f"ratelimit:{self.scope}:{digest}:{window}"

    def count(self, key: str) -> int:
        return int(cache.get(self._key(key)) or 0)

    def exceeded(self, key: str) -> bool:
        return self.count(key) >= self.limit

    def hit(self, key: str) -> int:
        """Count one attempt; returns the count in the current window."""
        cache_key = self._key(key)
        # add() is atomic and only sets a missing key; incr() is atomic in Redis.
        if cache.add(cache_key, 1, timeout=self.window_s + 1):
            return 1
        try:
            return int(cache.incr(cache_key))
        except ValueError:  # expired between add() and incr()
            cache.add(cache_key, 1, timeout=self.window_s + 1)
            return 1

    def reset(self, key: str) -> None:
        cache.delete(self._key(key))

    def retry_after(self) -> int:
        """Seconds until the current window rolls over."""
        return max(1, self.window_s - int(time.time()) % self.window_s)


# Failed sign-ins per client address: 20 per 5 minutes stops guessing, not typos.
LOGIN_FAILURES = RateLimit(scope="login-failures", limit=20, window_s=300)
# Failed sign-ins per account, from anywhere: guessing one password from many addresses.
ACCOUNT_FAILURES = RateLimit(scope="login-failures-account", limit=10, window_s=300)
# Failed bearer tokens per client address (a scanner trying tokens).
TOKEN_FAILURES = RateLimit(scope="token-failures", limit=30, window_s=300)


def client_address(request: Any) -> str:
    """The client's address: the peer, or behind PORTAL_TRUSTED_PROXIES reverse proxies the
    address the outermost of them saw (each appends its peer to X-Forwarded-For). Entries
    further left are the client's own claims and are never trusted: anyone could pick a
    fresh budget per request."""
    meta = getattr(request, "META", {})
    hops = int(settings.PORTAL.get("TRUSTED_PROXIES", 0) or 0)
    if hops > 0:
        chain = [a.strip() for a in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if len(chain) >= hops:
            return chain[-hops]
    return str(meta.get("REMOTE_ADDR") or "unknown")


def _account(request: Any) -> str:
    return str(request.POST.get("username", "")).strip().lower()[:150]


class RateLimitedLoginView(auth_views.LoginView):
    """Django's LoginView that stops answering password guesses from a noisy address."""

    limit = LOGIN_FAILURES

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if self.limit.exceeded(client_address(request)) or ACCOUNT_FAILURES.exceeded(
            _account(request)
        ):
            # Refuse without validating the form: validation would check the password.
            form = self.get_form()
            form.cleaned_data = {}
            form._errors = ErrorDict()  # type: ignore[attr-defined]  # Django's own, unstubbed
            form.add_error(
                None,
                "Too many failed sign-in attempts from your address or for this account; "
                f"try again in {self.limit.retry_after()} seconds.",
            )
            response = self.render_to_response(self.get_context_data(form=form), status=429)
            response["Retry-After"] = str(self.limit.retry_after())
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        self.limit.hit(client_address(self.request))
        if _account(self.request):
            ACCOUNT_FAILURES.hit(_account(self.request))
        return super().form_invalid(form)
