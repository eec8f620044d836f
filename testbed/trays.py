"""Emulated trays run the way a real rack runs them: one `python -m nodeagent` process per
tray (the command the README and the Helm chart run), and in the Kubernetes layout one IMEX
runner process beside it (`python -m nodeagent.runner`), both on the tray's own root.

    tray = Tray(url, node, root=tmp_path / node.hostname, runner=True)
    tray.start()                       # runner (if any), then the agent
    tray.wait_ready()
    tray.kill_agent()                  # kill -9: the agent's container crashed
    tray.start_agent()                 # ... and came back

The tray's world (what NVML, /proc and the host say) is arranged through files under its
root: `run/nvidia-emu/fabric.json` is what NVML reports (see nodeagent.probe), a unit
link under `etc/systemd/system` is the host's own IMEX service, `proc/<pid>` a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from domains.inventory.models import Node
from nodeagent.config import Paths
from nodeagent.files import read_json, write_atomic
from nodeagent.imex.supervisor import own_daemon
from nodeagent.runner import status_path
from testbed.agents import JOIN_TOKEN, ensure_join_token
from testbed.emulator.tray import (
    EMU_DIR,
    IMEX_BIN,
    IMEX_CTL_BIN,
    GpuFacts,
    TrayFacts,
    prepare_tray,
)
from testbed.processes import (
    VENV_BIN,
    Proc,
    free_port,
    pod_argv,
    pod_hosts,
    process_env,
    wait_until,
)


def facts_of(node: Node, *, fabric_state: str = "COMPLETED") -> TrayFacts:
    return TrayFacts(
        hostname=node.hostname,
        ip=node.management_ip or "",
        cluster_uuid=node.clique.cluster_uuid if node.clique else "",
        clique_id=node.clique.clique_id if node.clique else 0,
        gpus=[
            GpuFacts(index=i, uuid=f"GPU-{node.hostname}-{i}", fabric_state=fabric_state)
            for i in range(node.gpu_count)
        ],
    )


class Tray:
    def __init__(
        self,
        portal_url: str,
        facts: TrayFacts,
        *,
        root: Path,
        runner: bool = False,
        args: tuple[str, ...] = (),
        fabric_file: bool = True,
        join_token: str | None = JOIN_TOKEN,
        pods: bool = False,
    ) -> None:
        """`join_token` None: the agent gets none (it joins with what `args` give it).
        `pods`: agent and runner each in a pod of their own (testbed.processes.pod_argv;
        implies `runner`)."""
        self.url = portal_url
        self.facts = facts
        self.hostname = facts.hostname
        self.root = prepare_tray(root, facts)
        self.paths = Paths(self.root)
        self.use_runner = runner or pods
        self.pods = pods
        self.args = args
        self.fabric_file = fabric_file
        self.health_port = free_port()
        self.agent: Proc | None = None
        self.runner: Proc | None = None
        self.join_token = join_token
        if join_token == JOIN_TOKEN:
            ensure_join_token()

    # --- processes ------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        # The emulated daemons run on this interpreter (a version manager's shim is slow).
        env = process_env(IMEX_EMU_PYTHON=str(VENV_BIN / "python"))
        if not self.pods:
            # No pod stands in for the daemon's mount namespace: it resolves names through
            # the file its parent writes (the runner's stand-in, or the tray's etc/hosts).
            env["IMEX_EMU_HOSTS"] = str(self.runner_hosts_file if self.use_runner else "etc/hosts")
        return env

    @property
    def runner_hosts_file(self) -> Path:
        """The runner's own /etc/hosts: its pod's copy, or a stand-in without pods."""
        return self.root / "run/pods/imex-runner/hosts"

    def pod(self, name: str, argv: list[str]) -> list[str]:
        if not self.pods:
            return argv
        hosts = pod_hosts(self.root / "run/pods" / name, self.hostname, self.facts.ip)
        return pod_argv(argv, hosts=hosts)

    def start(self) -> Tray:
        if self.use_runner:
            self.start_runner()
        self.start_agent()
        return self

    def start_agent(self) -> None:
        argv = [
            str(VENV_BIN / "python"),
            "-m",
            "nodeagent",
            "--portal",
            self.url,
            *(["--join-token", self.join_token] if self.join_token else []),
            "--root",
            str(self.root),
            "--hostname",
            self.hostname,
            "--ip",
            self.facts.ip,
            "--imex-bin",
            IMEX_BIN,
            "--imex-ctl-bin",
            IMEX_CTL_BIN,
            "--health-addr",
            f"127.0.0.1:{self.health_port}",
            "--poll-interval",
            "2",
            "--heartbeat-interval",
            "3",
            *(["--fabric-facts", str(self.fabric_path)] if self.fabric_file else []),
            *(["--imex-runner"] if self.use_runner else []),
            *self.args,
        ]
        self.agent = Proc(f"agent-{self.hostname}", self.pod("agent", argv), self.env())

    def start_runner(self) -> None:
        argv = [
            str(VENV_BIN / "python"),
            "-m",
            "nodeagent.runner",
            "--root",
            str(self.root),
            "--imex-bin",
            IMEX_BIN,
            "--stop-timeout",
            "5",
            *([] if self.pods else ["--hosts-file", str(self.runner_hosts_file)]),
        ]
        self.runner = Proc(f"runner-{self.hostname}", self.pod("imex-runner", argv), self.env())

    def kill_agent(self, sig: int = signal.SIGKILL) -> None:
        """The agent's process dies (kill -9: a crash, an OOM kill) or is stopped (SIGTERM)."""
        if self.agent and self.agent.alive():
            self.agent.kill(sig)
            self.agent.popen.wait(15)

    def stop(self) -> None:
        """Tear the tray down: agent, runner (which stops its daemon), any daemon left."""
        if self.agent:
            self.agent.stop(timeout=10)
        if self.runner:
            self.runner.stop(timeout=15)
        pid = self.daemon_pid()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Tray:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        return self.agent.log() if self.agent else ""

    # --- what the tray looks like -----------------------------------------------------------
    def health(self, path: str = "/readyz") -> dict[str, Any]:
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}{path}", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return {"ok": False, "trays": []}

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            if self.agent and not self.agent.alive():
                raise RuntimeError(f"agent of {self.hostname} exited:\n{self.log()[-3000:]}")
            return bool(self.health().get("ok"))

        wait_until(ready, timeout=timeout, interval=0.2, what=f"{self.hostname} to join")

    def runner_status(self) -> dict[str, Any]:
        return read_json(status_path(self.paths)) or {}

    def daemon_pid(self) -> int | None:
        """The tray's running nvidia-imex, whoever runs it (as this process numbers it)."""
        if self.pods:
            return own_daemon(self.paths.imex_config)  # the status names the pod's number
        if self.use_runner:
            status = self.runner_status()
            pid = status.get("pid") if status.get("running") else None
        else:
            try:
                pid = int(self.paths.pidfile.read_text().split()[0])
            except (FileNotFoundError, ValueError, IndexError):
                return None
        if pid is None:
            return None
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return None
        return None if stat.rsplit(")", 1)[1].split()[0] == "Z" else int(pid)

    def ctl(self, *flags: str) -> str:
        """What `nvidia-imex-ctl -c <the agent's config>` prints on this tray now."""
        done = subprocess.run(
            [IMEX_CTL_BIN, "-c", str(self.paths.imex_config), *flags],
            capture_output=True,
            text=True,
            timeout=10,
            env=self.env(),
            check=False,
        )
        return done.stdout

    def domain_status(self) -> str:
        """The `status` of `nvidia-imex-ctl -N -j` (UP, DEGRADED, DOWN), "" if no answer."""
        try:
            return str(json.loads(self.ctl("-N", "-j")).get("status", ""))
        except ValueError:
            return ""

    # --- arranging the tray's world ---------------------------------------------------------
    @property
    def fabric_path(self) -> Path:
        return self.root / EMU_DIR / "fabric.json"

    def set_fabric(self, **changes: Any) -> None:
        """Change what NVML reports from now on (`gpu_state=` sets every GPU's state)."""
        doc = json.loads(self.fabric_path.read_text())
        state = changes.pop("gpu_state", None)
        if state:
            for gpu in doc["gpus"]:
                gpu["fabric_state"] = state
        doc.update(changes)
        write_atomic(self.fabric_path, json.dumps(doc, indent=1) + "\n")


@contextlib.contextmanager
def trays_of(portal: str, nodes: list[Node], root: Path, **kw: Any) -> Iterator[list[Tray]]:
    """A running Tray (agent, emulated daemon) per Node under `root`, each joined and ready."""
    trays = [Tray(portal, facts_of(n), root=root / n.hostname, **kw) for n in nodes]
    with contextlib.ExitStack() as stack:
        for tray in trays:
            stack.enter_context(tray)
        for tray in trays:
            tray.wait_ready()
        yield trays
