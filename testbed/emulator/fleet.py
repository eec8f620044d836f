# SPDX-License-Identifier: Apache-2.0
"""One process hosting the reconcile loops of many emulated trays (demo and tests).

    python -m testbed.emulator.fleet --portal URL --join-token T --spec fleet.json \
        --root var/agents [--only HOST,HOST] [--health-addr HOST:PORT] [--stop-daemons-on-exit]
        [--imex-runner]

Each tray gets its own root (`<root>/<hostname>`: /etc, /dev, /proc, state), its own
loopback IP and its own `nvidia-imex` process (the emulator's); only the agents' loops share
this process, one thread each. Each tray's agent can be stopped and started on its own, and
so can its daemon, without touching anything else (`python -m testbed.emulator.trayctl`
writes the tray's wish into `<root>/<hostname>/demo-control.json`, which this process
follows within a second): a stopped agent stops as a crashed one would, leaving its daemon
running; a started one re-adopts it. The spec file lists the trays:

    {"trays": [{"hostname": "gb-r01-t01", "ip": "127.0.1.1", "cluster_uuid": "…",
                "clique_id": 0, "driver_version": "580.82.07",
                "gpus": [{"index": 0, "uuid": "GPU-…", "product": "NVIDIA GB200"}],
                "faults": {"start_delay_s": 2}}]}

`python -m testbed.fleetspec --out fleet.json` writes one for the portal's trays.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from nodeagent.agent import Agent, FatalError
from nodeagent.cli import setup_logging
from nodeagent.config import AgentConfig
from nodeagent.health import HealthServer
from testbed.emulator.tray import (
    CONTROL_FILE,
    EMU_DIR,
    IMEX_BIN,
    IMEX_CTL_BIN,
    GpuFacts,
    TrayFacts,
    daemon_pid,
    prepare_tray,
    read_faults,
    set_faults,
)

log = logging.getLogger("nodeagent.fleet")


def tray_facts(entry: dict[str, Any]) -> TrayFacts:
    return TrayFacts(
        hostname=entry["hostname"],
        ip=entry["ip"],
        cluster_uuid=entry.get("cluster_uuid", ""),
        clique_id=int(entry.get("clique_id") or 0),
        gpus=[
            GpuFacts(
                index=int(g["index"]),
                uuid=g["uuid"],
                product=g.get("product", "NVIDIA GB200"),
                fabric_state=g.get("fabric_state", "COMPLETED"),
            )
            for g in entry.get("gpus", [])
        ],
        driver_version=entry.get("driver_version", "580.82.07"),
        channel_major=int(entry.get("channel_major") or 0),
    )


class Fleet:
    """The agents of many emulated trays, each looping in its own thread, each stoppable on
    its own (`follow_controls`)."""

    def __init__(self, trays: list[dict[str, Any]], base: AgentConfig, root: Path) -> None:
        self.stop_event = threading.Event()
        self.configs: dict[str, AgentConfig] = {}
        self.roots: dict[str, Path] = {}
        for entry in trays:
            facts = tray_facts(entry)
            tray_root = (root / facts.hostname).resolve()
            prepare_tray(tray_root, facts, entry.get("faults"))
            self.roots[facts.hostname] = tray_root
            self.configs[facts.hostname] = AgentConfig(
                **{
                    **base.__dict__,
                    "root": tray_root,
                    "hostname": facts.hostname,
                    "ip": facts.ip,
                    "fabric_facts": tray_root / EMU_DIR / "fabric.json",
                    "kubelet_dir": (
                        base.kubelet_dir / facts.hostname if base.kubelet_dir else None
                    ),
                }
            )
        self.agents: dict[str, Agent] = {}
        self.threads: dict[str, threading.Thread] = {}

    def start(self) -> None:
        for hostname in self.configs:
            self.start_agent(hostname)

    def start_agent(self, hostname: str) -> None:
        """A new agent for the tray (it re-adopts the daemon its last one left running)."""
        agent = Agent(self.configs[hostname], stop=threading.Event())
        thread = threading.Thread(target=self._run, args=(agent,), name=agent.log.tray)
        self.agents[hostname], self.threads[hostname] = agent, thread
        thread.start()

    def crash_agent(self, hostname: str) -> None:
        """The tray's agent stops as a crashed one would: its daemon runs on, nothing is
        torn down, nothing more is reported."""
        agent = self.agents.pop(hostname, None)
        thread = self.threads.pop(hostname, None)
        if agent is None or thread is None:
            return
        agent.cfg = replace(agent.cfg, stop_daemon_on_exit=False)
        agent.request_stop()
        thread.join(30)

    def follow_controls(self) -> None:
        """Do what each tray's control file asks (see the module's doc)."""
        for hostname, root in self.roots.items():
            wish = read_control(root)
            running = hostname in self.agents
            if wish.get("agent") == "stopped" and running:
                log.warning("%s: agent stopped by the tray control", hostname)
                self.crash_agent(hostname)
            elif wish.get("agent") != "stopped" and not running and not self.stop_event.is_set():
                log.warning("%s: agent started by the tray control", hostname)
                self.start_agent(hostname)
            hold_daemon(root, wish.get("daemon") == "stopped")

    def _run(self, agent: Agent) -> None:
        try:
            agent.run()
        except FatalError as exc:
            log.error("%s: %s", agent.log.tray, exc)
        except Exception:
            log.exception("%s: agent loop died", agent.log.tray)

    def stop(self) -> None:
        self.stop_event.set()
        for agent in list(self.agents.values()):
            agent.request_stop()

    def join(self) -> None:
        for thread in list(self.threads.values()):
            thread.join()

    def health(self) -> list[dict[str, Any]]:
        return [
            self.agents[h].health()
            if h in self.agents
            else {"tray": h, "alive": False, "ready": False, "stopped": True}
            for h in self.configs
        ]


def read_control(root: Path) -> dict[str, Any]:
    """What the tray control asks of this tray ({} when nothing)."""
    try:
        wish = json.loads((root / CONTROL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return wish if isinstance(wish, dict) else {}


def hold_daemon(root: Path, held: bool) -> None:
    """Keep the tray's daemon from running (killed, and refusing to start) or let it be."""
    faults = read_faults(root)
    if bool(faults.get("stopped")) == held:
        return
    if held:
        set_faults(root, {**faults, "stopped": True})
        pid = daemon_pid(root)
        if pid is not None:
            log.warning("%s: IMEX daemon stopped by the tray control", root.name)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    else:
        log.warning("%s: IMEX daemon let start by the tray control", root.name)
        set_faults(root, {k: v for k, v in faults.items() if k != "stopped"})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed.emulator.fleet", description=__doc__)
    p.add_argument("--portal", required=True)
    p.add_argument("--join-token", required=True)
    p.add_argument("--spec", type=Path, required=True, help="JSON file listing the trays")
    p.add_argument("--root", type=Path, required=True, help="Parent of every tray's root")
    p.add_argument("--only", default="", help="Comma-separated hostnames to run (default all)")
    p.add_argument("--health-addr", default="")
    p.add_argument("--poll-interval", type=float, default=5.0)
    p.add_argument("--heartbeat-interval", type=float, default=10.0)
    p.add_argument(
        "--stop-daemons-on-exit",
        action="store_true",
        help="Stop each tray's nvidia-imex when the fleet stops (demo/tests; a real agent "
        "leaves a serving daemon running across its own restarts)",
    )
    p.add_argument("--emulated-channel-files", action="store_true")
    p.add_argument(
        "--imex-runner",
        action="store_true",
        help="Each tray's nvidia-imex is run by its IMEX runner (python -m nodeagent.runner "
        "--root <root>/<hostname>, started apart: its own pod), not by this process",
    )
    p.add_argument(
        "--kubelet-dir",
        type=Path,
        default=None,
        help="Every tray is a DRA kubelet plugin; tray T's kubelet directory is DIR/T (keep it "
        "short: unix socket paths hold 107 bytes)",
    )
    p.add_argument("--kubeconfig", type=Path, default=None)
    p.add_argument("--log-level", default=os.environ.get("NODEAGENT_LOG_LEVEL", "INFO"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args.log_level)
    # The emulated daemons run on this interpreter, not on whatever `python3` is first on
    # PATH: a version manager's shim there (pyenv's) costs ~60 ms of CPU per start, which
    # was most of forming 18 trays at once on two cores.
    os.environ.setdefault("IMEX_EMU_PYTHON", sys.executable)
    if not args.imex_runner:
        # The daemons run here, on the host, one per tray root: each resolves its peers'
        # names through its tray's etc/hosts, the host's /etc/hosts of that tray.
        os.environ.setdefault("IMEX_EMU_HOSTS", "etc/hosts")
    trays = json.loads(args.spec.read_text(encoding="utf-8"))["trays"]
    if args.only:
        wanted = set(args.only.split(","))
        trays = [t for t in trays if t["hostname"] in wanted]
    base = AgentConfig(
        portal=args.portal,
        join_token=args.join_token,
        imex_bin=[IMEX_BIN],
        imex_ctl_bin=[IMEX_CTL_BIN],
        poll_interval=args.poll_interval,
        heartbeat_interval=args.heartbeat_interval,
        stop_daemon_on_exit=args.stop_daemons_on_exit,
        imex_runner=args.imex_runner,
        emulated_channel_files=args.emulated_channel_files,
        kubelet_dir=args.kubelet_dir.resolve() if args.kubelet_dir else None,
        kubeconfig=args.kubeconfig,
    )
    fleet = Fleet(trays, base, args.root)
    signal.signal(signal.SIGTERM, lambda *_: fleet.stop())
    signal.signal(signal.SIGINT, lambda *_: fleet.stop())
    health = HealthServer(args.health_addr, fleet.health) if args.health_addr else None
    if health:
        health.start()
    log.info("fleet of %d emulated trays against %s", len(fleet.configs), args.portal)
    fleet.start()
    # The main thread follows the trays' controls; signal handlers run here and just set
    # the stop event.
    while not fleet.stop_event.wait(1.0):
        fleet.follow_controls()
    fleet.join()
    if health:
        health.stop()
    log.info("fleet stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
