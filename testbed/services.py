"""Private backing services for outage tests: a redis-server and a PostgreSQL cluster of
their own, in a temporary directory, on a free port, that a test may stop and start again
without touching the ones the rest of the suite uses. The same servers `make test` and
`make demo` start (testbed/devservices.py).

    with PrivateRedis() as redis:
        server, url = start_server(REDIS_URL=redis.url)
        redis.stop(); ...; redis.start()

    with PrivatePostgres() as pg:
        pg.create_database("portal"); url = pg.url("portal")
        pg.restart()   # "terminating connection due to administrator command"
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from testbed.devservices import LocalPostgres, LocalRedis


class PrivateRedis(LocalRedis):
    """No persistence, so a restart starts empty; `stop` kills it as a crash would (no
    goodbye to its clients)."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__(Path(tempfile.mkdtemp(prefix="portal-redis-")), port=port)

    def stop(self, *, crash: bool = True) -> None:
        super().stop(crash=crash)

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivatePostgres(LocalPostgres):
    """A throwaway cluster (fsync off) with trust authentication on 127.0.0.1."""

    def __init__(self, port: int | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="portal-pg-"))
        self.dir.chmod(0o755)  # the server's own user (when we are root) must reach its data
        super().__init__(self.dir / "data", port=port, ephemeral=True)

    def url(self, db: str = "postgres") -> str:
        return super().url(db)

    def __enter__(self) -> PrivatePostgres:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
