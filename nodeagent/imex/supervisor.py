# SPDX-License-Identifier: Apache-2.0
"""Who keeps the tray's one `nvidia-imex` running (`Supervisor`), and the agent's own
`Daemon`: its child, in its own session, found again through a pidfile.

The other supervisor is the IMEX runner (`nodeagent.runner`), a separate long-lived process
the agent drives through files, for a host where the agent's restart takes its children
with it (a container).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from nodeagent.config import Paths
from nodeagent.files import remove, write_atomic
from nodeagent.host import live_processes
from nodeagent.imex.files import write_hosts

Log = logging.Logger | logging.LoggerAdapter[Any]

USR1_INTERVAL_S = 5.0
# nvidia-imex processes at most one SIGUSR1 every 5 s, counted from when it handled the last
# one (NVIDIA's IMEX guide, "Signal handling"); whoever signals it spaces its own by a little
# more, so a busy moment cannot make one too early.
USR1_SPACING_S = USR1_INTERVAL_S + 0.5


STARTING = "starting"  # what the pidfile says while a daemon is being started


class Supervisor(Protocol):
    """Whoever keeps the tray's one `nvidia-imex` running for the agent."""

    pid: int | None
    exit_code: int | None  # of the daemon that exited on its own, until it is started again

    def adopt(self) -> bool:
        """Take over the daemon a previous agent process left running; True if there is one."""
        ...

    def start(self) -> None: ...

    def running(self) -> bool:
        """True while our daemon runs (or its start is under way)."""
        ...

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after `timeout`; returns once it is gone."""
        ...

    def problem(self) -> str:
        """Why the daemon cannot be run at all right now, or ""."""
        ...

    def set_hosts(self, hosts: Mapping[str, str]) -> None:
        """The names of a domain that follows its workload and their addresses now (name →
        IP, every name of its nodes file; empty: none): written into the hosts file the
        daemon itself resolves names through."""
        ...

    def resolve(self) -> None:
        """Tell the running daemon to re-resolve its peers' names (SIGUSR1, by its parent)."""
        ...


LOG_TAIL_LINES = 5
LOG_TAIL_BYTES = 4096


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` non-empty lines of a log (read from its last 4 KiB), each cut to
    200 characters; [] when there is no log. Why a daemon exited is there ("Address already
    in use"), not in its exit code."""
    try:
        with path.open("rb") as fh:
            start = max(0, fh.seek(0, os.SEEK_END) - LOG_TAIL_BYTES)
            fh.seek(start)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    found = text.splitlines()[1 if start else 0 :]  # from mid-line: drop the part line
    kept = [line.rstrip()[:200] for line in found if line.strip()]
    return kept[-lines:]


def rotate_log(path: Path) -> None:
    """Put a released domain's daemon log aside (`<name>.1`, replacing an older one): the
    next domain's errors quote only its own daemon's lines, never the previous tenant's."""
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, path.with_name(path.name + ".1"))


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown (adopted daemon)"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class Daemon:
    """The agent's own child, in its own session so that it outlives the agent's process.

    A pidfile lets the next agent process re-adopt it. For a host where the agent's service
    manager kills the agent's children with it (a container, a systemd unit with the default
    KillMode), use the IMEX runner instead (`nodeagent.runner`).
    """

    def __init__(
        self,
        argv: list[str],
        paths: Paths,
        log: Log,
        on_exit: Callable[[], None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = argv
        self.paths = paths
        self.log = log
        self.on_exit = on_exit  # woken at once when our child exits (crash detection)
        self.env = None if env is None or env == os.environ else dict(env)
        self.child: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None

    # --- lifecycle ------------------------------------------------------------------------
    def adopt(self) -> bool:
        """Take over a daemon a previous agent started, if one runs with our config.

        The pidfile names it. An agent can die between starting the daemon and writing its
        pid (a kill -9, an OOM kill: bench/soak.py met it); such a daemon holds the tray (a
        second one fails with NV_ERR_IN_USE) and nothing would ever stop it. So `start`
        writes `starting` into the pidfile before the daemon exists, and only a pidfile left
        saying that (or unreadable) makes the agent look for its daemon among the processes:
        an ordinary first start costs no walk over /proc.
        """
        try:
            words = self.paths.pidfile.read_text().split()
        except FileNotFoundError:
            return False  # no daemon was being started: nothing to look for
        except OSError:
            words = []
        pid = int(words[0]) if words and words[0].isdigit() else None
        if pid is not None and not (_alive(pid) and str(self.paths.imex_config) in _cmdline(pid)):
            remove(self.paths.pidfile)  # a daemon that ended; a later start rewrites it first
            return False
        if pid is None:
            pid = own_daemon(self.paths.imex_config)
            if pid is None:
                remove(self.paths.pidfile)
                return False
            with contextlib.suppress(OSError):  # a full disk: the pid is known all the same
                write_atomic(self.paths.pidfile, f"{pid}\n", durable=False)
            self.log.warning("found nvidia-imex pid %s running without a pidfile", pid)
        self.pid = pid
        self.child = None
        self.exit_code = None
        self.log.info("re-adopted running nvidia-imex pid %s", pid)
        return True

    def start(self) -> None:
        self.paths.daemon_log.parent.mkdir(parents=True, exist_ok=True)
        # Before the daemon exists: an agent killed before its pid is written leaves this
        # behind, and the next one looks for the daemon (`adopt`). A full disk stops here,
        # before there is a daemon nobody knows of.
        write_atomic(self.paths.pidfile, f"{STARTING}\n", durable=False)
        with self.paths.daemon_log.open("ab") as log_fh:
            # Own session: the daemon outlives an agent crash/restart (it is re-adopted).
            self.child = subprocess.Popen(
                [*self.argv, "-c", str(self.paths.imex_config)],
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=self.env,
            )
        self.pid = self.child.pid
        self.exit_code = None
        write_atomic(self.paths.pidfile, f"{self.pid}\n", durable=False)
        if self.on_exit is not None:
            threading.Thread(
                target=self._watch, args=(self.child, self.on_exit), daemon=True
            ).start()
        self.log.info("started nvidia-imex pid %s", self.pid)

    @staticmethod
    def _watch(child: subprocess.Popen[bytes], on_exit: Callable[[], None]) -> None:
        child.wait()
        on_exit()

    def running(self) -> bool:
        if self.pid is None:
            return False
        if self.child is not None:
            code = self.child.poll()
            if code is None:
                return True
            self.exit_code = code
        elif _alive(self.pid):
            return True
        self.log.warning("nvidia-imex pid %s exited (%s)", self.pid, describe_exit(self.exit_code))
        self.pid = None
        self.child = None
        remove(self.paths.pidfile)
        return False

    def problem(self) -> str:
        return ""

    def set_hosts(self, hosts: Mapping[str, str]) -> None:
        # This daemon is the agent's own, on the agent's host: it resolves through the
        # same hosts file the agent sees.
        write_hosts(self.paths.hosts, hosts)

    def resolve(self) -> None:
        if self.pid is not None and self.running():
            _signal(self.pid, signal.SIGUSR1)

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after `timeout`; always reaps our own child."""
        if self.pid is None:
            self.adopt()  # one left without a pidfile must not outlive a release
        if self.pid is None or not self.running():
            remove(self.paths.pidfile)
            self.exit_code = None
            return
        pid = self.pid
        self.log.info("stopping nvidia-imex pid %s", pid)
        _signal(pid, signal.SIGTERM)
        if not self._wait_gone(pid, timeout):
            self.log.warning("nvidia-imex pid %s ignored SIGTERM; sending SIGKILL", pid)
            _signal(pid, signal.SIGKILL)
            self._wait_gone(pid, timeout)
        self.pid = None
        self.child = None
        self.exit_code = None
        remove(self.paths.pidfile)

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        if self.child is not None:
            try:
                self.child.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                return True
            time.sleep(0.02)
        return False


def _alive(pid: int) -> bool:
    """Running and not a zombie (an adopted daemon's exit is reaped by someone else)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def own_daemon(config: Path) -> int | None:
    """The oldest live process started as `… -c <config>` (how the agent starts its daemon;
    `nvidia-imex-ctl` has flags after the config), or None."""
    want = ["-c", str(config)]
    found = [(p.start, p.pid) for p in live_processes(Path("/proc")) if p.args[-2:] == want]
    return min(found)[1] if found else None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
