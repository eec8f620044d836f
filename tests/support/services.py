"""Private backing services for outage tests: a redis-server and a PostgreSQL cluster of
their own, in a temporary directory, on a free port, that a test may stop and start again
without touching the machine's shared ones.

    with PrivateRedis() as redis:
        server, url = start_server(REDIS_URL=redis.url)
        redis.stop(); ...; redis.start()

    with PrivatePostgres() as pg:
        pg.create_database("portal"); url = pg.url("portal")
        pg.restart()   # "terminating connection due to administrator command"
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.processes import free_port, wait_until


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class PrivateRedis:
    """A throwaway redis-server: no persistence, so a restart starts empty (as a Redis
    that lost its memory would)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="portal-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=(self.dir / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(lambda: _port_open(self.port), 10, what="private redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # as a crash would: no goodbye to its clients
            self.proc.wait(10)
        self.proc = None
        wait_until(lambda: not _port_open(self.port), 10, what="private redis-server gone")

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} not found under /usr/lib/postgresql/*/bin")
    return found[-1]


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (initdb + pg_ctl), trust auth on 127.0.0.1. Run as root,
    the cluster belongs to the `postgres` user (PostgreSQL refuses to run as root)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="portal-pg-"))
        self.data = self.dir / "data"
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            pw = pwd.getpwnam(self._user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def _run(self, argv: list[str]) -> None:
        if self._user:
            argv = ["runuser", "-u", self._user, "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    def url(self, db: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def init(self) -> None:
        self._run(
            [
                _pg_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\nfsync = off\n"
                "synchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
            )

    def start(self) -> None:
        self._run(
            [
                _pg_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.dir / "pg.log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )

    def stop(self, mode: str = "fast") -> None:
        """`fast` ends every session with "terminating connection due to administrator
        command", as a restart by an operator or a failover does."""
        self._run([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def create_database(self, name: str, template: str = "template0") -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {template}')

    def __enter__(self) -> PrivatePostgres:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
