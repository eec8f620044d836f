# SPDX-License-Identifier: Apache-2.0
"""The IMEX runner: a small, long-lived process that is the parent of the tray's nvidia-imex.

    python -m nodeagent.runner --root / --driver-root /driver-root

Why it exists. A restarted `nvidia-imex` is a new instance: its peers at once clean up
everything they shared with it, and running jobs break. So the daemon must outlive the
agent, whose restarts are ordinary (an upgrade, a crash, an OOM kill, a failed liveness
probe, an eviction). In a container that is impossible for a child: when a container stops,
the runtime kills every process in it. NVIDIA's DRA driver solves it the same way: its
kubelet plugin (restarted freely) never runs `nvidia-imex`; a separate pod, the compute
domain daemon, is its parent. Here that pod is the runner's DaemonSet: one tiny process per
tray, updated only by hand (`updateStrategy: OnDelete`), with no liveness probe and no
memory limit that could kill it, and nothing in it that changes with the agent.

The agent drives it through two files in `<root>/var/lib/domain-portal/runner/` (a host
directory both pods mount at the same path), level-triggered like the agent itself, typed
in `nodeagent.imex.runnerfiles`: the agent's `request.json` (`RunnerRequest`) and the
runner's `status.json` (`RunnerStatus`). The runner keeps a daemon for `instance` running
while `run` is true, and starts one when the instance it runs is not the requested one
(stopping the old one first). `pid` in its status is the daemon's pid in the runner's own
PID namespace: a number for reading, never one to signal from another pod.

The peers of a domain that follows its workload are the runner's business, as they are
the compute-domain daemon's in NVIDIA's driver: the nodes file lists stable names, and
`peers` maps the current members' slots to their IPs. The runner writes them into its OWN
`/etc/hosts` (`--hosts-file`; in its pod, the kubelet's bind mount of the pod's copy,
which is what its `nvidia-imex` resolves names through: written in place, never renamed
onto), before it starts a daemon, and reports the generation it wrote as
`peers_generation`. `resolve` is a counter: when the agent raises it, the runner sends
SIGUSR1 to its own child (spaced by USR1_SPACING_S: the daemon ignores a second one within
5 s) and reports the value as `resolved`. A daemon started after the change reads the
names at its start and needs none. Neither the agent's hosts file nor a pid of another
PID namespace is ever involved.

A daemon that exits on its own stays exited, with its exit status in `status.json`: the
agent reports it and decides to restart by asking for a new instance. Stopping is always a
request (a release, a drain) or the runner's own SIGTERM (its pod is deleted: an uninstall,
or an operator replacing it on an idle tray), never a side effect of the agent's restart.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from nodeagent.config import AGENT_VERSION, Paths, split_command
from nodeagent.driver import CapabilityError, DriverRoot, ensure_imex_mgmt
from nodeagent.imex.files import legacy_peers, slot_name, write_hosts
from nodeagent.imex.runnerfiles import (
    HEARTBEAT_S,
    PROTOCOL,
    STALE_S,
    RunnerRequest,
    RunnerStatus,
    fresh,
    read_request,
    read_status,
    request_path,
    status_path,
    write_request,
    write_status,
)
from nodeagent.imex.supervisor import USR1_SPACING_S, Log, describe_exit

log = logging.getLogger("nodeagent.runner")

POLL_S = 0.05  # how often the runner looks at the request and its child

__all__ = ["Runner", "RunnerDaemon", "main", "request_path", "status_path"]


class Runner:
    """The runner process: one child, as the request says."""

    def __init__(
        self,
        paths: Paths,
        argv: list[str],
        env: dict[str, str],
        stop_timeout: float,
        hosts_file: Path = Path("/etc/hosts"),
    ):
        self.paths = paths
        self.argv = argv
        self.env = env
        self.stop_timeout = stop_timeout
        self.hosts_file = hosts_file  # the one this runner's daemon resolves names through
        # -1: not written by this process yet (a new pod's hosts file is the kubelet's copy)
        self.peers_generation = -1
        self.resolved = 0  # the agent's last `resolve` this runner acted on
        self.usr1_at = -USR1_SPACING_S
        self.stop_event = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.instance = 0  # of the child (running or exited); 0: none started here
        self.exit_code: int | None = None
        previous = read_status(status_path(paths))
        self.starts = previous["starts"] if previous else 0
        self.written: dict[str, Any] = {}
        self.written_at = 0.0

    def run(self) -> None:
        log.info("IMEX runner for %s (daemon: %s)", self.paths.root, " ".join(self.argv))
        while not self.stop_event.is_set():
            try:
                self.step()
            except OSError as exc:  # a full disk, a vanished directory: try again
                log.error("runner step failed: %s", exc)
            self.stop_event.wait(POLL_S)
        self.stop_child()
        self.write_status()

    def step(self) -> None:
        request = read_request(self.paths)
        wanted = request["instance"] if request["run"] else 0
        if self.child is not None and self.child.poll() is not None:
            self.exit_code = self.child.returncode
            log.warning(
                "nvidia-imex pid %s exited (%s)", self.child.pid, describe_exit(self.exit_code)
            )
            self.child = None
        if self.instance and self.instance != wanted:
            self.stop_child()
            self.instance = 0
        self.apply_peers(request)  # before a start: the new daemon reads them at once
        if wanted and self.instance != wanted:
            self.start_child(wanted, request["config"] or str(self.paths.imex_config))
            self.resolved = request["resolve"]  # it resolves every name at start
        self.signal_resolve(request["resolve"])
        self.write_status()

    def apply_peers(self, request: RunnerRequest) -> None:
        """Write the requested peer names into this runner's own hosts file (in place)."""
        generation = request["peers_generation"]
        if generation == self.peers_generation:
            return
        try:
            hosts = _requested_hosts(request)
        except (AttributeError, TypeError, ValueError):
            log.error("request.json: hosts must map names to IPs: %r", request["hosts"])
            return
        if write_hosts(self.hosts_file, hosts):
            log.info("peers (generation %s) written to %s", generation, self.hosts_file)
        self.peers_generation = generation

    def signal_resolve(self, wanted: int) -> None:
        """SIGUSR1 to our own child for each rise of the agent's `resolve`, spaced."""
        if wanted == self.resolved:
            return
        if self.child is None or self.child.poll() is not None:
            self.resolved = wanted  # the next daemon resolves every name at its start
            return
        now = time.monotonic()
        if now < self.usr1_at + USR1_SPACING_S:
            return  # it would be ignored as too soon: sent once the window is over
        self.child.send_signal(signal.SIGUSR1)
        self.usr1_at, self.resolved = now, wanted
        log.info("IMEX peers changed; nvidia-imex pid %s told to re-resolve", self.child.pid)

    def start_child(self, instance: int, config: str) -> None:
        self.instance, self.exit_code = instance, None
        try:  # the daemon opens it; this pod's /dev is the host's
            ensure_imex_mgmt(self.paths.root)
        except CapabilityError as exc:
            log.error("%s", exc)  # the daemon's own start then says what it lacks
        try:
            # The daemon's output is the runner's (its pod's log); no new session needed.
            self.child = subprocess.Popen(
                [*self.argv, "-c", config], stdin=subprocess.DEVNULL, env=self.env
            )
        except OSError as exc:
            log.error("cannot start %s: %s", self.argv[0], exc)
            self.exit_code = 127
            return
        self.starts += 1
        log.info("started nvidia-imex pid %s (instance %s)", self.child.pid, instance)

    def stop_child(self) -> None:
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        log.info("stopping nvidia-imex pid %s", child.pid)
        child.terminate()
        try:
            child.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            log.warning("nvidia-imex pid %s ignored SIGTERM; sending SIGKILL", child.pid)
            child.kill()
            child.wait()
        self.exit_code = None

    def write_status(self) -> None:
        doc: dict[str, Any] = {
            "protocol": PROTOCOL,
            "instance": self.instance,
            "pid": self.child.pid if self.child else None,
            "running": self.child is not None,
            "exit_code": self.exit_code,
            "starts": self.starts,
            "runner_pid": os.getpid(),
            "version": AGENT_VERSION,  # an old runner kept by OnDelete shows as a condition
            "peers_generation": max(self.peers_generation, 0),
            "resolved": self.resolved,
        }
        now = time.time()
        if doc == self.written and now - self.written_at < HEARTBEAT_S:
            return
        status: RunnerStatus = {**doc, "updated_at": now}  # type: ignore[typeddict-item]
        write_status(self.paths, status)
        self.written, self.written_at = doc, now


def _requested_hosts(request: RunnerRequest) -> dict[str, str]:
    """The block of names the agent asks for: `hosts` (protocol 2), or the members by slot
    of an agent of protocol 1 (`portal-imex-<slot>`, only the members)."""
    if request["protocol"] >= 2:
        return {str(name): str(ip) for name, ip in request["hosts"].items()}
    return {slot_name(int(slot)): str(ip) for slot, ip in request["peers"].items()}


class RunnerDaemon:
    """The agent's side: a `Supervisor` whose daemon the runner runs (see the module doc)."""

    def __init__(self, paths: Paths, log: Log, *, start_timeout: float = 15.0) -> None:
        self.paths = paths
        self.log = log
        self.start_timeout = start_timeout
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.requested_at = 0.0

    def _request(self) -> RunnerRequest:
        return read_request(self.paths)

    def _status(self) -> RunnerStatus | None:
        return read_status(status_path(self.paths))

    def _write(self, **changes: Any) -> None:
        """Change some fields of the request, keeping the others (the peers above all)."""
        fields = {"protocol": PROTOCOL, "config": str(self.paths.imex_config)}
        write_request(self.paths, cast(RunnerRequest, {**self._request(), **changes, **fields}))

    def adopt(self) -> bool:
        request, status = self._request(), self._status()
        if not (request["run"] and status and status["instance"] == request["instance"]):
            return False
        if not (status["running"] and status["pid"] and fresh(status)):
            return False
        self.pid = status["pid"]
        self.log.info("re-adopted nvidia-imex pid %s run by the IMEX runner", self.pid)
        return True

    def start(self) -> None:
        instance = self._request()["instance"] + 1
        self._write(run=True, instance=instance)
        self.requested_at = time.monotonic()
        self.exit_code = None
        self.log.info("asked the IMEX runner to start nvidia-imex (instance %s)", instance)

    def running(self) -> bool:
        request = self._request()
        if not request["run"]:
            return False
        status = self._status()
        if status is None or status["instance"] != request["instance"]:
            return True  # the runner has not taken the request up yet: see problem()
        if status["running"]:
            self.pid = status["pid"]
            return True
        if self.pid is not None:
            self.exit_code = status["exit_code"]
            self.log.warning(
                "nvidia-imex pid %s exited (%s)", self.pid, describe_exit(self.exit_code)
            )
            self.pid = None
        elif self.exit_code is None and status["exit_code"] is not None:
            self.exit_code = status["exit_code"]  # it exited before this agent looked
        return False

    def problem(self) -> str:
        request, status = self._request(), self._status()
        if not request["run"]:
            return ""
        waited = time.monotonic() - self.requested_at if self.requested_at else 0.0
        taken = status is not None and status["instance"] == request["instance"]
        if (not taken and waited > self.start_timeout) or (status and not fresh(status)):
            return (
                f"the IMEX runner has not answered for {max(waited, STALE_S):.0f} s "
                f"({status_path(self.paths)}): is its pod running on this tray?"
            )
        if request["hosts"] and status is not None and taken and _too_old(request, status):
            return (
                f"the IMEX runner (version {status['version'] or 'unknown'}) cannot write "
                "the peer names of this domain that follows its workload into its hosts "
                "file: delete its pod while the tray is idle so that the current one "
                "replaces it"
            )
        return ""

    def set_hosts(self, hosts: Mapping[str, str]) -> None:
        request = self._request()
        wanted = dict(hosts)
        if request["hosts"] == wanted:
            return
        peers = {str(slot): ip for slot, ip in sorted(legacy_peers(hosts).items())}
        generation = request["peers_generation"] + 1
        self._write(hosts=wanted, peers=peers, peers_generation=generation)

    def peers_applied(self) -> bool:
        """Whether the runner has written the peer list last asked for."""
        status = self._status()
        wanted = self._request()["peers_generation"]
        return status is not None and status.get("peers_generation", -1) == wanted

    def resolve(self) -> None:
        self._write(resolve=self._request()["resolve"] + 1)

    def stop(self, timeout: float) -> None:
        request = self._request()
        if request["run"]:
            self._write(run=False, instance=request["instance"])
            self.log.info("asked the IMEX runner to stop nvidia-imex")
        deadline = time.monotonic() + 2 * timeout + 1
        while time.monotonic() < deadline:
            status = self._status()
            if status is None or not status["running"] or not fresh(status):
                break
            time.sleep(0.05)
        self.pid = None
        self.exit_code = None


def _too_old(request: RunnerRequest, status: RunnerStatus) -> bool:
    """Whether the runner cannot write the requested names: one that writes no peers at all,
    or one of protocol 1 asked for names with a token."""
    if "peers_generation" not in status:
        return True
    return status["protocol"] < 2 and not legacy_peers(request["hosts"])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nodeagent.runner", description="Domain Portal IMEX runner")
    p.add_argument("--root", type=Path, default=Path("/"), help="The agent's --root")
    p.add_argument("--driver-root", type=Path, default=Path("/"), help="The NVIDIA driver root")
    p.add_argument("--imex-bin", default="", help="nvidia-imex (default: the driver root's)")
    p.add_argument("--stop-timeout", type=float, default=10.0, help="SIGTERM → SIGKILL (s)")
    p.add_argument(
        "--hosts-file",
        type=Path,
        default=Path("/etc/hosts"),
        help="The hosts file this runner's nvidia-imex resolves peer names through: its pod's "
        "own /etc/hosts (written in place)",
    )
    p.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    paths = Paths(args.root.resolve())
    driver = DriverRoot(args.driver_root)
    runner = Runner(
        paths,
        driver.command("nvidia-imex", split_command(args.imex_bin)),
        driver.environment(paths.driver_libs),
        args.stop_timeout,
        args.hosts_file,
    )
    # The pod going away (uninstall, an operator's OnDelete update) stops the daemon
    # gracefully, so that its peers clean up at once instead of waiting for it.
    signal.signal(signal.SIGTERM, lambda *_: runner.stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: runner.stop_event.set())
    runner.run()
    log.info("IMEX runner stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
