# SPDX-License-Identifier: Apache-2.0
"""Driving `nvidia-imex`: config and nodes file, one daemon per tray, readiness and health.

The same code runs NVIDIA's binaries on a tray and the emulator's in the demo and tests.
What it relies on, from NVIDIA's IMEX documentation: the config and nodes file are read
only at start; `DAEMONIZE=0` keeps the daemon in the foreground; `nvidia-imex-ctl -q` prints
exactly one word and ready means exactly `READY`; `-N -j` gives the domain state and every
peer's connection; SIGTERM is a graceful stop; a restart is a new instance and breaks
running jobs, so a restarted agent re-adopts the daemon instead of restarting it.

Who is the daemon's parent is a deployment choice (`Supervisor`): the agent itself
(`Daemon`, in its own session, found again through a pidfile) on a host where the agent's
restart does not take its children with it, or the IMEX runner (`nodeagent.runner`), a
separate long-lived process the agent drives through files, where it does (a container).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentwire.messages import PeerStatus
from nodeagent.config import IMEX_GRACE_TIME_S, IMEX_LOG_LEVEL, Paths
from nodeagent.files import remove, write_atomic, write_in_place
from nodeagent.host import live_processes

Log = logging.Logger | logging.LoggerAdapter[Any]


def render_config(
    *,
    paths: Paths,
    bind_ip: str,
    server_port: int,
    cmd_port: int,
    grace_time: int = IMEX_GRACE_TIME_S,
    log_level: int = IMEX_LOG_LEVEL,
) -> str:
    """The daemon's config: foreground, command port on, our nodes file, this tray's IP.

    `grace_time` (IMEX_NODE_DISCONNECTED_GRACE_TIME): how long a disconnected peer may stay
    away before what it shared is cleaned up; NVIDIA's -1 waits forever, so a network blip
    never breaks a running job. `log_level`: 0 (off) to 4 (info, NVIDIA's default).
    """
    lines = [
        "# Written by the Domain Portal node agent, which owns this daemon.",
        "DAEMONIZE=0",
        f"SERVER_PORT={server_port}",
        f"BIND_INTERFACE_IP={bind_ip}",
        "IMEX_CMD_ENABLED=1",
        f"IMEX_CMD_PORT={cmd_port}",
        f"IMEX_CMD_BIND_INTERFACE_IP={bind_ip}",
        f"IMEX_NODE_CONFIG_FILE={paths.nodes_file}",
        "IMEX_WAIT_FOR_QUORUM=RECOVERY",
        f"IMEX_NODE_DISCONNECTED_GRACE_TIME={grace_time}",
        "IMEX_ENABLE_AUTH_ENCRYPTION=0",
        f"LOG_LEVEL={log_level}",
        "LOG_FILE_NAME=",
    ]
    return "\n".join(lines) + "\n"


def render_nodes(peer_ips: list[str]) -> str:
    """One IP per line; the line number is the node's index, identical on every member."""
    return "".join(f"{ip}\n" for ip in peer_ips)


# --- stable names: a domain that follows its workload -----------------------------------------
# NVIDIA's way to change IMEX membership without restarting anyone: the nodes file lists one
# stable name per slot, identical on every member and never changed while the domain lives;
# each tray maps the names of the current members to their IPs in its hosts file, and
# SIGUSR1 makes the daemon re-resolve them (at most once every 5 s).
#
# The list is fixed, as NVIDIA's driver writes it: MAX_NODES names (its
# maxNodesPerIMEXDomain, 18 by default: one NVL72 rack), whatever the clique's size. A list
# that followed the number of trays in the clique changed on every member, and restarted
# every member's daemon, whenever a tray was added to the clique or relabelled. The names
# are the portal's own (NVIDIA's are `compute-domain-daemon-%04d`, and NVIDIA's daemon
# drops every hosts line that names one), so the two drivers never edit each other's lines.
MAX_NODES = 18
# The oldest driver whose nvidia-imex takes names in its nodes file and re-resolves them on
# SIGUSR1: NVIDIA's driver refuses to run its DNS-name mode on anything older.
NAMES_MIN_DRIVER = "570.158.01"
SLOT_PREFIX = "portal-imex-"
USR1_INTERVAL_S = 5.0
# nvidia-imex processes at most one SIGUSR1 every 5 s, counted from when it handled the last
# one (NVIDIA's IMEX guide, "Signal handling"); whoever signals it spaces its own by a little
# more, so a busy moment cannot make one too early.
USR1_SPACING_S = USR1_INTERVAL_S + 0.5
# Written by the daemon's parent: the IMEX runner, or the agent where it runs the daemon
# itself. A block an older agent marked "(written by the node agent)" is ours too.
HOSTS_BEGIN = "# BEGIN domain-portal IMEX peers"
HOSTS_END = "# END domain-portal IMEX peers"


def slot_name(index: int) -> str:
    return f"{SLOT_PREFIX}{index}"


def names_unsupported(driver_version: str) -> str:
    """Why this driver's nvidia-imex cannot serve a domain that follows its workload, or ""
    (also when the version is unknown: the daemon's own start then says what is wrong)."""
    have, need = _version(driver_version), _version(NAMES_MIN_DRIVER)
    if not have or have >= need:
        return ""
    return (
        f"a domain that follows its workload needs NVIDIA driver {NAMES_MIN_DRIVER} or newer "
        f"(nvidia-imex with peer names and SIGUSR1); this tray runs {driver_version}: update "
        "its driver, or give the domain a fixed number of trays (numNodes)"
    )


def _version(text: str) -> tuple[int, ...]:
    """`570.158.01` → (570, 158, 1); () when it is not a dotted number."""
    parts = text.strip().split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def render_names() -> str:
    """The nodes file of a domain that follows its workload: MAX_NODES names, always."""
    return "".join(f"{slot_name(i)}\n" for i in range(MAX_NODES))


def write_hosts(path: Path, peers: Mapping[int, str]) -> bool:
    """Map each member's slot name to its IP in our block of the hosts file, keeping every
    other line; returns whether the file changed. No peers: the block goes.

    Always written in place (the same inode), never renamed onto: in a pod, `/etc/hosts` is
    the kubelet's bind mount of the pod's own copy, and only its inode is what the pod's
    resolver reads."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not peers:
            return False
        text = ""
    kept = _without_block(text)
    block = [HOSTS_BEGIN, *(f"{ip}\t{slot_name(i)}" for i, ip in sorted(peers.items())), HOSTS_END]
    wanted = kept + "\n".join(block) + "\n" if peers else kept
    if wanted == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o644, exist_ok=True)
    write_in_place(path, wanted)
    return True


def remove_hosts(path: Path) -> None:
    write_hosts(path, {})


def _without_block(text: str) -> str:
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith(HOSTS_BEGIN):
            inside = True
        elif line == HOSTS_END:
            inside = False
        elif not inside:
            lines.append(line)
    return "".join(f"{line}\n" for line in lines)


# What a running daemon cannot follow without a new instance: who its peers are and where it
# and they listen. Any other key (the log level, the grace time of a newer agent) waits for
# the daemon's next start: an agent upgrade is never a reason to break running jobs.
RESTART_KEYS = (
    "SERVER_PORT",
    "BIND_INTERFACE_IP",
    "IMEX_CMD_PORT",
    "IMEX_CMD_BIND_INTERFACE_IP",
    "IMEX_NODE_CONFIG_FILE",
)


def config_values(text: str) -> dict[str, str]:
    """`KEY=VALUE` lines, `#` comments, as the daemon reads them."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def write_config(*, paths: Paths, config: str, nodes: str) -> bool:
    """Atomically write both files; True when a running daemon must restart to follow them."""
    try:
        before = config_values(paths.imex_config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        before = {}
    nodes_changed = write_atomic(paths.nodes_file, nodes, durable=False)
    write_atomic(paths.imex_config, config, durable=False)
    after = config_values(config)
    return nodes_changed or any(before.get(k) != after.get(k) for k in RESTART_KEYS)


def remove_config(paths: Paths) -> None:
    remove(paths.imex_config)
    remove(paths.nodes_file)


@dataclass(frozen=True)
class DomainHealth:
    state: str  # UP | DEGRADED | DOWN, "" when unknown
    peers: list[PeerStatus] = field(default_factory=list)
    # This node's own row: the local daemon's state, the word `-q` prints ("" if absent).
    own_state: str = ""


def parse_domain_json(text: str, own_index: int) -> DomainHealth:
    """`nvidia-imex-ctl -N -j` → domain state and this node's connection to every peer."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    node = doc.get("nodes", {}).get(str(own_index), {})
    peers: list[PeerStatus] = [
        {"index": int(j), "ip": str(conn.get("host", "")), "status": str(conn.get("status", ""))}
        for j, conn in sorted(node.get("connections", {}).items(), key=lambda kv: int(kv[0]))
    ]
    return DomainHealth(
        state=str(doc.get("status", "")), peers=peers, own_state=str(node.get("status", ""))
    )


class CtlError(RuntimeError):
    pass


def accepts(ip: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts connections on the daemon's command port yet.

    A starting daemon does not listen for a while; asking `nvidia-imex-ctl -q` then costs a
    process that can only say it could not connect. A connect from here tells the same for
    a fraction of it (the ctl connects to the same address and port)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


class Ctl:
    """`nvidia-imex-ctl` against our config file."""

    def __init__(
        self, argv: list[str], paths: Paths, timeout: float, env: Mapping[str, str] | None = None
    ) -> None:
        self.argv = argv
        self.paths = paths
        self.timeout = timeout
        # The agent's own environment is passed as None (inherited as it is): a dict is
        # encoded variable by variable at every call, a tenth of a call's cost in the agent.
        self.env = None if env is None or env == os.environ else dict(env)

    def _run(self, *flags: str) -> str:
        try:
            done = subprocess.run(
                [*self.argv, "-c", str(self.paths.imex_config), *flags],
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env=self.env,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CtlError(f"nvidia-imex-ctl {' '.join(flags)}: {exc}") from exc
        return done.stdout

    def query(self) -> str:
        """The daemon's state word; ready means exactly `READY`."""
        out = self._run("-q").strip()
        return out if out and " " not in out else ""

    def domain(self, own_index: int) -> DomainHealth:
        text = self._run("-N", "-j")
        try:
            return parse_domain_json(text, own_index)
        except (ValueError, AttributeError, TypeError) as exc:
            raise CtlError(f"nvidia-imex-ctl -N -j: not the expected JSON: {text[:200]!r}") from exc


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

    def set_peers(self, peers: Mapping[int, str]) -> None:
        """The peers a domain that follows its workload has now (slot → IP; empty: none):
        written into the hosts file the daemon itself resolves names through."""
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

    def set_peers(self, peers: Mapping[int, str]) -> None:
        # This daemon is the agent's own, on the agent's host: it resolves through the
        # same hosts file the agent sees.
        write_hosts(self.paths.hosts, peers)

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
