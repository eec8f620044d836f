"""Real node agents for end-to-end tests: emulated trays driven by `nodeagent` processes.

    from testbed.agents import AgentFleet

    server, url = start_server()          # testbed.processes
    worker = start_worker()
    with AgentFleet(url, Node.objects.filter(rack=rack)) as fleet:
        fleet.wait_joined()
        ...                                # request a domain; the trays form it for real
        fleet.kill_daemon("gb-r01-t03")    # faults: kill -9 an IMEX daemon
        fleet.control("gb-r01-t03", "kill")  # one tray dead: its agent and daemon stopped
        fleet.kill_agents()                # kill -9 the agent process (daemons live on)
        fleet.start()                      # ... and bring it back (re-adopts the daemons)

One `AgentFleet` is one agent process hosting the loops of the given trays (pass `only=` to
split trays over several fleets, e.g. to kill one tray's agent alone). Each tray has its own
root under a temp dir, its own loopback IP (the node's management IP) and its own emulated
`nvidia-imex` process. Leaving the `with` block stops the agents and every tray's daemon.

Needs `@pytest.mark.django_db(transaction=True)`: the server and agents see committed rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from agentwire.messages import NodeFacts
from agentwire.messages import node_facts as contract_facts
from domains.agents.models import JoinToken
from domains.inventory.models import Node
from domains.security import hash_token
from nodeagent.config import Paths
from nodeagent.imex.supervisor import own_daemon
from testbed.emulator.tray import IMEX_BIN
from testbed.fleetspec import fleet_spec
from testbed.processes import (
    VENV_BIN,
    Proc,
    free_port,
    pod_argv,
    pod_hosts,
    process_env,
    wait_until,
)
from testbed.processes import wait_for as wait_for  # the tests' one wait, re-exported

JOIN_TOKEN = "dpj_e2e-test-join-token"


def node_facts(node: Node) -> NodeFacts:
    """The facts a tray's agent would send, so joining keeps it on its clique."""
    return contract_facts(
        hostname=node.hostname,
        ip=node.management_ip,
        cluster_uuid=node.clique.cluster_uuid,
        clique_id=node.clique.clique_id,
        channel_major=237,
    )


def ensure_join_token(raw: str = JOIN_TOKEN) -> str:
    JoinToken.objects.get_or_create(token_hash=hash_token(raw), defaults={"name": "e2e agents"})
    return raw


class AgentFleet:
    def __init__(
        self,
        portal_url: str,
        nodes: Iterable[Node],
        *,
        root: Path | None = None,
        poll_interval: float = 2.0,
        heartbeat_interval: float = 5.0,
        faults: dict[str, dict[str, Any]] | None = None,
        name: str = "agents",
        kubelet_dir: Path | None = None,
        kubeconfig: Path | None = None,
        wrap: list[str] | None = None,
        health_host: str = "127.0.0.1",
        pods: bool = False,
    ) -> None:
        """`faults`: hostname → emulator fault knobs (start_delay_s, crash_after_s,
        refuse_peers, version), applied before the daemons start. `wrap`: an argv prefix the
        agent process runs under (`ip netns exec …`: testbed.netcut), `health_host`
        the address its health endpoint listens on (reachable from here).

        `pods`: as the Helm chart runs them. The agents' process is one pod and every tray's
        IMEX runner another (testbed.processes.pod_argv: each its own PID and mount
        namespace and its own /etc/hosts); the runner is the parent of the tray's daemon,
        which resolves its peers' names through the runner pod's /etc/hosts alone."""
        self.url = portal_url
        nodes = list(nodes)
        self.hostnames = [n.hostname for n in nodes]
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="trays-")
        self.root = Path(root or self._tmp.name)  # type: ignore[union-attr]
        spec = fleet_spec(Node.objects.filter(pk__in=[n.pk for n in nodes]).order_by("pk"))
        for tray in spec["trays"]:
            if faults and tray["hostname"] in faults:
                tray["faults"] = faults[tray["hostname"]]
        self.spec_path = self.root / "fleet.json"
        self.spec_path.parent.mkdir(parents=True, exist_ok=True)
        self.spec_path.write_text(json.dumps(spec))
        self.poll_interval = poll_interval
        self.heartbeat_interval = heartbeat_interval
        self.name = name
        # Kubernetes: every tray is a DRA kubelet plugin; its kubelet directory is
        # <kubelet_dir>/<hostname> (short: unix socket paths hold 107 bytes).
        self.kubelet_dir = kubelet_dir
        self.kubeconfig = kubeconfig
        self.health_port = free_port()
        self.wrap = list(wrap or [])
        self.health_host = health_host
        self.pods = pods
        self.runners: dict[str, Proc] = {}
        self.proc: Proc | None = None
        ensure_join_token()

    # --- process control ------------------------------------------------------------------
    def start(self, only: Iterable[str] | None = None) -> AgentFleet:
        """Start (or restart) the agent process; `only` restricts it to some trays."""
        argv = [
            str(VENV_BIN / "python"),
            "-m",
            "testbed.emulator.fleet",
            "--portal",
            self.url,
            "--join-token",
            JOIN_TOKEN,
            "--spec",
            str(self.spec_path),
            "--root",
            str(self.root),
            "--poll-interval",
            str(self.poll_interval),
            "--heartbeat-interval",
            str(self.heartbeat_interval),
            "--health-addr",
            f"{self.health_host}:{self.health_port}",
            "--stop-daemons-on-exit",  # SIGTERM = graceful removal; kill_agents() = a crash
        ]
        if only:
            argv += ["--only", ",".join(only)]
        if self.kubelet_dir:
            argv += ["--kubelet-dir", str(self.kubelet_dir), "--kubeconfig", str(self.kubeconfig)]
        if self.pods:
            for host in only or self.hostnames:
                self.start_runner(host)
            argv = pod_argv([*argv, "--imex-runner"], hosts=self.pod_hosts(self.name))
        self.proc = Proc(self.name, [*self.wrap, *argv], process_env())
        return self

    def pod_hosts(self, pod: str) -> Path:
        """The /etc/hosts of one of this fleet's pods (the kubelet's per-pod copy)."""
        return pod_hosts(self.root / "pods" / pod, pod)

    def start_runner(self, hostname: str) -> None:
        """The tray's IMEX runner pod, unless it runs already (it outlives the agents)."""
        runner = self.runners.get(hostname)
        if runner is not None and runner.alive():
            return
        argv = [
            str(VENV_BIN / "python"),
            "-m",
            "nodeagent.runner",
            "--root",
            str(self.tray_root(hostname)),
            "--imex-bin",
            IMEX_BIN,
            "--stop-timeout",
            "5",
        ]
        pod = f"runner-{hostname}"
        self.runners[hostname] = Proc(
            pod,
            pod_argv(argv, hosts=self.pod_hosts(pod)),
            process_env(IMEX_EMU_PYTHON=str(VENV_BIN / "python")),
        )

    def control(self, hostname: str, action: str) -> None:
        """The demo's tray control (`testbed.emulator.trayctl`): stop or start one tray's
        agent or daemon (`kill`: both), followed by this fleet's process within a second."""
        from testbed.emulator.trayctl import control

        control(self.root, hostname, action)

    def kill_agents(self) -> None:
        """kill -9 the agent process; the trays' IMEX daemons keep running (own sessions)."""
        if self.proc:
            self.proc.kill(signal.SIGKILL)
            self.proc.popen.wait(10)

    def stop(self) -> None:
        """Stop the agents gracefully (they stop their daemons), then kill any daemon left."""
        if self.proc:
            self.proc.stop(timeout=15)
        for runner in self.runners.values():
            runner.stop(timeout=15)
        for host in self.hostnames:
            self.kill_daemon(host, signal.SIGKILL)

    def __enter__(self) -> AgentFleet:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._tmp:
            self._tmp.cleanup()

    def log(self) -> str:
        return self.proc.log() if self.proc else ""

    # --- waiting --------------------------------------------------------------------------
    def health(self, path: str = "/readyz") -> dict[str, Any]:
        try:
            resp = httpx.get(f"http://{self.health_host}:{self.health_port}{path}", timeout=2)
            return resp.json()
        except (httpx.HTTPError, ValueError):
            return {"ok": False, "trays": []}

    def wait_joined(self, timeout: float = 60) -> None:
        """Every tray of this fleet joined and reported."""

        def ready() -> bool:
            if self.proc and not self.proc.alive():
                raise RuntimeError(f"agent fleet exited:\n{self.log()[-3000:]}")
            return bool(self.health().get("ok"))

        wait_until(ready, timeout=timeout, interval=0.2, what="agents to join")

    # --- a tray's view --------------------------------------------------------------------
    def tray_root(self, hostname: str) -> Path:
        return self.root / hostname

    def daemon_pid(self, hostname: str) -> int | None:
        """The tray's running nvidia-imex, pidfile or not (one an agent started and died
        before writing its pidfile still holds the tray), or None."""
        return own_daemon(Paths(self.tray_root(hostname)).imex_config)

    def kill_daemon(self, hostname: str, sig: int = signal.SIGKILL) -> int | None:
        pid = self.daemon_pid(hostname)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pid

    def set_faults(self, hostname: str, **knobs: Any) -> None:
        """Fault knobs the tray's next daemon start reads (run/nvidia-emu/faults.json)."""
        from testbed.emulator.tray import set_faults

        set_faults(self.tray_root(hostname), knobs)

    def runner_hosts(self, hostname: str) -> str:
        """What the tray's runner pod has in its /etc/hosts (`pods` only)."""
        return self.pod_hosts(f"runner-{hostname}").read_text()

    def nodes_file(self, hostname: str) -> str | None:
        path = Paths(self.tray_root(hostname)).nodes_file
        return path.read_text() if path.exists() else None

    def channel_devices(self, hostname: str) -> dict[str, tuple[int, int]]:
        """name → (major, minor) of every channel char device on the tray."""
        directory = self.tray_root(hostname) / "dev/nvidia-caps-imex-channels"
        found = {}
        if directory.exists():
            for entry in directory.iterdir():
                st = entry.lstat()
                found[entry.name] = (os.major(st.st_rdev), os.minor(st.st_rdev))
        return found

    def proc_devices_major(self, hostname: str) -> int:
        text = (self.tray_root(hostname) / "proc/devices").read_text()
        return next(
            int(line.split()[0])
            for line in text.splitlines()
            if line.endswith(" nvidia-caps-imex-channels")
        )

    def cdi_spec(self, hostname: str) -> dict[str, Any] | None:
        path = Paths(self.tray_root(hostname)).cdi_spec
        return json.loads(path.read_text()) if path.exists() else None

    def leftovers(self, hostname: str) -> list[str]:
        """What release must have removed: daemon, config, nodes file, channels, CDI spec."""
        root = self.tray_root(hostname)
        paths = Paths(root)
        left = [
            str(p.relative_to(root))
            for p in (paths.imex_config, paths.nodes_file, paths.cdi_spec)
            if p.exists()
        ]
        left += [f"dev/{name}" for name in self.channel_devices(hostname)]
        if self.daemon_pid(hostname):
            left.append("nvidia-imex process")
        return left
