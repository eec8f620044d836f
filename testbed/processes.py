"""Real processes for integration tests: the ASGI server, Celery workers and beat.

They run against the test database that pytest-django created (use
`@pytest.mark.django_db(transaction=True)` so they see committed data) and the real Redis.
Each test session gets its own Celery queue, so stray tasks of other runs never land here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from testbed.devservices import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
SESSION_QUEUE = f"test-{uuid.uuid4().hex[:8]}"
# The notifications' own queue (portal/celery.py), served by `start_notifier`.
NOTIFY_QUEUE = f"{SESSION_QUEUE}.notifications"
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", ROOT / "test-artifacts"))


def database_url() -> str:
    """The URL of the database the tests use right now (the `test_…` one)."""
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


def process_env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PORTAL_TESTING": "1",
        "DATABASE_URL": database_url(),
        "DB_CONN_MAX_AGE": "0",
        "CELERY_QUEUE": SESSION_QUEUE,
        "PYTHONUNBUFFERED": "1",
        "PORTAL_RECONCILE_SECONDS": "1",
    }
    env.update(extra)
    return env


class Proc:
    """A child process whose output goes to a log file under test-artifacts/logs."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log_dir = ARTIFACTS / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a worker's pool children too)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 10) -> None:
        self.kill(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.popen.wait(5)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


# --- pods: a process as Kubernetes runs a pod's container ----------------------------------
# Its own PID namespace (it is pid 1 there, with its own /proc: a pid it reads or signals is
# one of its own pod's) and mount namespace, and over /etc/hosts the pod's own copy,
# bind-mounted as the kubelet mounts it (a rename onto it fails with EBUSY; only the copy's
# inode is what the pod's resolver reads). The network is the host's (hostNetwork: the
# trays' loopback IPs), and so is the filesystem below the mounts (hostPath volumes).
POD_MOUNT = 'mount --bind "$0" /etc/hosts && exec "$@"'


def pod_hosts(directory: Path, hostname: str, ip: str = "") -> Path:
    """A pod's hosts file as the kubelet writes it (`directory/hosts`), made once."""
    path = directory / "hosts"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        lines = [
            "# Kubernetes-managed hosts file (host network).",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            *([f"{ip}\t{hostname}"] if ip else []),
        ]
        path.write_text("\n".join(lines) + "\n")
    return path


def pod_argv(argv: list[str], *, hosts: Path) -> list[str]:
    """`argv` run as a pod's container (see above); needs root (we are, in the tests)."""
    return [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",  # implies --mount, with private propagation
        "--",
        "sh",
        "-c",
        POD_MOUNT,
        str(hosts),
        *argv,
    ]


def pods_supported() -> bool:
    """Whether this machine lets the tests make namespaces (root, util-linux's unshare)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--", "true"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    return done.returncode == 0


def wait_until(predicate, timeout: float = 30, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def wait_for(predicate: Any, timeout: float = 30, what: str = "condition") -> Any:
    """`wait_until` polling every 0.1 s (agents and controllers act in about that), with
    the timeout and what it waits for by position: `wait_for(ready, 10, "the slice")`."""
    return wait_until(predicate, timeout=timeout, interval=0.1, what=what)


def start_server(host: str = "127.0.0.1", **env: str) -> tuple[Proc, str]:
    """uvicorn on a free port of `host` (another address than 127.0.0.1: the host end of a
    testbed.netcut link, which ALLOWED_HOSTS then names too)."""
    port = free_port(host)
    if host != "127.0.0.1":
        env.setdefault("ALLOWED_HOSTS", f"{host},127.0.0.1,localhost")
    proc = Proc(
        "web",
        [
            str(VENV_BIN / "python"),
            "-m",
            "portal.serve",  # as production starts it: proxy headers per PORTAL_TRUSTED_PROXIES
            "portal.asgi:application",
            "--host",
            host,
            "--port",
            str(port),
            "--no-access-log",
        ],
        process_env(**env),
    )
    url = f"http://{host}:{port}"

    def healthy() -> bool:
        if not proc.alive():
            raise RuntimeError(f"web server exited:\n{proc.log()[-3000:]}")
        try:
            # 301: a production-like server sends plain HTTP to HTTPS, /healthz too.
            return httpx.get(f"{url}/healthz", timeout=1).status_code in (200, 301)
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=30, what="web server")
    return proc, url


def start_worker(
    name: str = "worker", concurrency: int = 4, *, queue: str = SESSION_QUEUE, **env: str
) -> Proc:
    """A controller worker (the session's queue), as the Procfile's `worker`."""
    proc = Proc(
        name,
        [
            str(VENV_BIN / "celery"),
            "-A",
            "portal",
            "worker",
            "--pool=threads",
            f"--concurrency={concurrency}",
            "-Q",
            queue,
            "--without-gossip",
            "--without-mingle",
            "--loglevel=INFO",
            "-n",
            f"{name}-{uuid.uuid4().hex[:6]}@%h",
        ],
        process_env(**env),
    )
    wait_until(lambda: "ready." in proc.log() or not proc.alive(), 30, what="celery worker")
    if not proc.alive():
        raise RuntimeError(f"worker exited:\n{proc.log()[-3000:]}")
    return proc


def start_notifier(concurrency: int = 4, **env: str) -> Proc:
    """The notifications' worker (deliveries, on their own queue), as the Procfile's
    `notifier`: beside the controller's worker, never in its way."""
    return start_worker("notifier", concurrency, queue=NOTIFY_QUEUE, **env)


def start_beat(**env: str) -> Proc:
    schedule = ARTIFACTS / f"beat-{uuid.uuid4().hex[:6]}"
    return Proc(
        "beat",
        [
            str(VENV_BIN / "celery"),
            "-A",
            "portal",
            "beat",
            "--loglevel=INFO",
            "--schedule",
            str(schedule),
        ],
        process_env(**env),
    )


@contextmanager
def running(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            proc.stop()
