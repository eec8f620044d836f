"""Per-user rate limits on what a signed-in user creates (portal.ratelimit): past the limit
the create is answered 429 with Retry-After, before its body is read. Only the actions
named are counted; reads never are."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from portal.ratelimit import SUBSCRIPTION_CREATES, TOKEN_MINTS, RateLimit, over_rate


class _CreateRate(BaseThrottle):
    limit: RateLimit
    actions = ("create",)

    def __init__(self) -> None:
        self._wait = 0

    def allow_request(self, request: Request, view: Any) -> bool:
        user = getattr(request, "user", None)
        if getattr(view, "action", None) not in self.actions or not getattr(user, "pk", None):
            return True
        self._wait = over_rate(self.limit, user.pk)  # type: ignore[union-attr]
        return not self._wait

    def wait(self) -> float | None:
        return self._wait or None


class TokenMintRate(_CreateRate):
    """API tokens minted per user and minute (PORTAL_TOKEN_MINTS_PER_MIN)."""

    limit = TOKEN_MINTS


class SubscriptionCreateRate(_CreateRate):
    """Subscriptions created per user and minute (PORTAL_SUBSCRIPTION_CREATES_PER_MIN)."""

    limit = SUBSCRIPTION_CREATES
