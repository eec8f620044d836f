"""Reading the environment for portal/settings.py: typed values and the database."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def database_from_env() -> dict[str, Any]:
    """DATABASES["default"] from DATABASE_URL and the DB_* variables: PostgreSQL only."""
    database: dict[str, Any] = dict(
        dj_database_url.parse(
            os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal"),
            conn_max_age=env_int("DB_CONN_MAX_AGE", 60),
            conn_health_checks=True,
        )
    )
    if database["ENGINE"] != "django.db.backends.postgresql":
        # Raw SQL (the desired-state document, heartbeats, tallies) and the advisory locks of
        # placement are PostgreSQL's; another engine would fail at the first agent call.
        raise ImproperlyConfigured(
            f"DATABASE_URL must name a PostgreSQL database (got {database['ENGINE']})"
        )
    if env_int("DB_POOL_MAX", 8) > 0:
        # Under ASGI every request runs its sync part on a fresh thread, so per-thread persistent
        # connections pile up until PostgreSQL refuses clients ("too many clients already" in
        # bench/agent_load.py). A per-process pool bounds them; requests wait for a free one.
        database["CONN_MAX_AGE"] = 0
        # The pool's health check on checkout (portal/postgres/pool.py): a look at the socket, and
        # an empty query only when the server has said something or the connection sat idle for
        # seconds. Without it the first request on each pooled connection after a PostgreSQL restart
        # or failover fails ("terminating connection due to administrator command"); the pool only
        # drops connections that come back broken. On by default (docs/reliability.md);
        # DB_POOL_CHECK=0 turns it off.
        database["ENGINE"] = "portal.postgres"  # Django's, with that check
        database["CONN_HEALTH_CHECKS"] = env_bool("DB_POOL_CHECK", True)
        database.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": env_int("DB_POOL_MAX", 8),
            # How long a request waits for a connection before answering 503 (PostgreSQL away or
            # every connection busy).
            "timeout": env_int("DB_POOL_TIMEOUT", 30),
        }
    return database


def test_worker_index() -> int | None:
    """The pytest-xdist worker this process belongs to (gw0 → 0, gw1 → 1, …; the processes a
    worker starts inherit its name), None outside a suite split over workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") else None


def redis_database(url: str, after: int) -> str:
    """`url` naming the database `after` places past the one it names (`/0` when none)."""
    parts = urlsplit(url)
    number = int(parts.path.strip("/") or 0) + after
    return urlunsplit(parts._replace(path=f"/{number}"))
