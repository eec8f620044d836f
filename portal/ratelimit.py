"""Small fixed-window rate limits kept in the shared cache (Redis), so every web process
counts together and a restart does not reset an attacker's budget.

Used for sign-in: failed password logins (web form) and failed bearer tokens (API) are
counted per client address. Past its limit a bearer-token key is refused until the window
rolls over; a sign-in address is paced instead (one password check every few seconds), so
it is slowed and never locked out.

    from portal.ratelimit import LOGIN_FAILURES
    if LOGIN_FAILURES.exceeded(key): refuse(retry_after=LOGIN_FAILURES.retry_after())
    ...
    LOGIN_FAILURES.hit(key)   # after a failure

Fixed windows let a burst of twice the limit straddle a boundary; for a sign-in brake that is
fine and costs one cache key per client per window.

Redis away (docs/reliability.md): the limiter never raises. It logs once, counts in this
process alone (the same limits, per process instead of shared) and asks Redis again after
`REDIS_RETRY_S`; the first answer switches back (logged once too). Counts made while Redis
was away are not carried over: the brake is briefly per process, never off and never an error.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

T = TypeVar("T")

# After Redis failed, how long the local counts are used before Redis is asked again.
REDIS_RETRY_S = 5.0


class _LocalCounts:
    """Fixed-window counts in this process, for while Redis is away. Keys carry their window,
    so expired ones are dropped whenever the table is touched."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, float]] = {}  # key -> (count, expires at)

    def _prune(self, now: float) -> None:
        for key in [k for k, (_, exp) in self._counts.items() if exp <= now]:
            del self._counts[key]

    def get(self, key: str) -> int:
        with self._lock:
            now = time.monotonic()
            count, expires = self._counts.get(key, (0, 0.0))
            return count if expires > now else 0

    def incr(self, key: str, timeout: float) -> int:
        with self._lock:
            now = time.monotonic()
            self._prune(now)
            count, expires = self._counts.get(key, (0, now + timeout))
            self._counts[key] = (count + 1, expires)
            return count + 1

    def delete(self, key: str) -> None:
        with self._lock:
            self._counts.pop(key, None)

    def add(self, key: str, timeout: float) -> bool:
        with self._lock:
            now = time.monotonic()
            self._prune(now)
            if key in self._counts:
                return False
            self._counts[key] = (1, now + timeout)
            return True


class _Backend:
    """The shared cache while it answers; the local counts (logged once) while it does not."""

    def __init__(self) -> None:
        self.local = _LocalCounts()
        self._lock = threading.Lock()
        self._away_until = 0.0  # monotonic; 0: Redis is believed up
        self._away = False

    def _call(self, shared: Callable[[], T], local: Callable[[], T]) -> T:
        if self._away and time.monotonic() < self._away_until:
            return local()
        try:
            result = shared()
        except (RedisError, OSError) as exc:
            with self._lock:
                if not self._away:
                    log.warning(
                        "rate limits: the shared cache is unreachable (%s); counting in this "
                        "process until it answers again",
                        exc,
                    )
                self._away = True
                self._away_until = time.monotonic() + REDIS_RETRY_S
            return local()
        if self._away:
            with self._lock:
                if self._away:
                    log.warning("rate limits: the shared cache answers again; counting there")
                self._away = False
        return result

    def get(self, key: str) -> int:
        return self._call(lambda: int(cache.get(key) or 0), lambda: self.local.get(key))

    def incr(self, key: str, timeout: int) -> int:
        def shared() -> int:
            # add() is atomic and only sets a missing key; incr() is atomic in Redis.
            if cache.add(key, 1, timeout=timeout):
                return 1
            try:
                return int(cache.incr(key))
            except ValueError:  # expired between add() and incr()
                cache.add(key, 1, timeout=timeout)
                return 1

        return self._call(shared, lambda: self.local.incr(key, timeout))

    def delete(self, key: str) -> None:
        self._call(lambda: cache.delete(key), lambda: self.local.delete(key))

    def add(self, key: str, timeout: float) -> bool:
        """Set `key` for `timeout` seconds unless it is set; whether this call set it."""
        return self._call(
            lambda: bool(cache.add(key, 1, timeout=timeout)),
            lambda: self.local.add(key, timeout),
        )


_backend = _Backend()


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
        return _backend.get(self._key(key))

    def exceeded(self, key: str) -> bool:
        return self.count(key) >= self.limit

    def hit(self, key: str) -> int:
        """Count one attempt; returns the count in the current window."""
        return _backend.incr(self._key(key), self.window_s + 1)

    def reset(self, key: str) -> None:
        _backend.delete(self._key(key))

    def retry_after(self) -> int:
        """Seconds until the current window rolls over."""
        return max(1, self.window_s - int(time.time()) % self.window_s)


@dataclass(frozen=True)
class Pace:
    """At most one go per `interval_s` seconds per key, in the scope `scope`: a brake that
    slows a key down and never shuts it out for longer than the interval."""

    scope: str
    interval_s: float

    def _key(self, key: str) -> str:
        return f"pace:{self.scope}:{hashlib.sha256(key.encode()).hexdigest()[:32]}"

    def take(self, key: str) -> bool:
        """Whether `key` may go now (and, if so, the next go waits `interval_s`)."""
        return _backend.add(self._key(key), self.interval_s)

    def waiting(self, key: str) -> bool:
        """Whether `key` went less than `interval_s` ago (without taking a go)."""
        return _backend.get(self._key(key)) > 0

    def reset(self, key: str) -> None:
        _backend.delete(self._key(key))

    def retry_after(self) -> int:
        return max(1, math.ceil(self.interval_s))


# Failed sign-ins per client address, whatever accounts they try (portal.signin). Per
# (account, address) django-axes locks out after a few; this ceiling is much higher and
# only slows: past it, the address gets one password check per SIGNIN_PACE interval, so a
# guesser walking through accounts crawls while the others behind the same NAT or proxy
# still sign in, waiting at most a few seconds.
LOGIN_FAILURES = RateLimit(
    scope="login-failures", limit=settings.PORTAL["SIGNIN_ADDRESS_CEILING"], window_s=300
)
SIGNIN_PACE = Pace(scope="signin", interval_s=settings.PORTAL["SIGNIN_ADDRESS_PACE_S"])


def signin_paced(address: str) -> bool:
    """Whether a password check from `address` must wait now: it is over the ceiling and
    its last check was less than a pace ago. Takes the go when it may."""
    return LOGIN_FAILURES.exceeded(address) and not SIGNIN_PACE.take(address)


# Failed bearer tokens per client address (a scanner), and per token prefix and address (a
# script retrying a revoked token): past either, failures are answered 429 instead of 401.
# Only failures: a valid token always works (portal/api/authentication.py).
TOKEN_FAILURES = RateLimit(
    scope="token-failures", limit=settings.PORTAL["TOKEN_FAILURE_LIMIT"], window_s=300
)
TOKEN_PREFIX_FAILURES = RateLimit(
    scope="token-failures-prefix", limit=settings.PORTAL["TOKEN_FAILURE_LIMIT"] // 10, window_s=300
)


def client_address(request: Any) -> str:
    """The client's address as uvicorn reports it: the peer, or, when the peer is one of
    PORTAL_TRUSTED_PROXIES, what that proxy put in X-Forwarded-For (portal.serve starts
    uvicorn so). Never read from the request's own headers here: anyone can write them."""
    return str(getattr(request, "META", {}).get("REMOTE_ADDR") or "unknown")


# What a signed-in user may create per minute (portal.api.throttles; the web pages too):
# 200 API tokens in 3 s and 100 webhook subscriptions in 1.2 s were all made.
TOKEN_MINTS = RateLimit(
    scope="token-mints", limit=settings.PORTAL["TOKEN_MINTS_PER_MIN"], window_s=60
)
SUBSCRIPTION_CREATES = RateLimit(
    scope="subscription-creates",
    limit=settings.PORTAL["SUBSCRIPTION_CREATES_PER_MIN"],
    window_s=60,
)


def over_rate(limit: RateLimit, user_id: int) -> int:
    """Count one go of `user_id` against `limit`; the seconds to wait when it is over (0:
    it may go)."""
    if limit.hit(str(user_id)) > limit.limit:
        return limit.retry_after()
    return 0
