"""Django's PostgreSQL backend, its connection pool built with portal.postgres.pool's check.

Django passes psycopg_pool's own check (an empty query on every checkout) when
CONN_HEALTH_CHECKS is on, and offers no way to pass another; this wrapper builds the pool
as Django 5.2 does (`DatabaseWrapper.pool`), with `check_connection` from pool.py instead.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool

from portal.postgres.pool import check_connection


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        options: Any = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not options:
            return None
        # Django's own names (django-stubs does not know them).
        pools: dict[str, ConnectionPool] = self._connection_pools  # type: ignore[attr-defined]
        configure = self._configure_connection  # type: ignore[attr-defined]
        if self.alias not in pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            kwargs = self.get_connection_params()
            kwargs["autocommit"] = True  # as Django: autocommit until it sets its own
            pool = ConnectionPool(
                kwargs=kwargs,
                open=False,
                configure=configure,
                check=check_connection if self.settings_dict["CONN_HEALTH_CHECKS"] else None,
                **({} if options is True else options),
            )
            pools.setdefault(self.alias, pool)
        return pools[self.alias]
