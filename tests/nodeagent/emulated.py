"""Emulated trays for the emulator's own tests: each with its root, loopback IP and daemon.

    trays = make_trays(tmp_path, 3)            # configs written, nothing started
    for t in trays: t.start()
    trays[0].wait_domain("UP")
    trays[1].kill()                            # kill -9
    assert trays[0].cell(1) == "RECOVERING"

Every daemon logs to `<root>/var/log/imex.log`, so a test reads a live daemon's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from nodeagent.driver import ensure_imex_mgmt
from testbed.emulator.tray import IMEX_BIN, IMEX_CTL_BIN, TrayFacts, daemon_starts, prepare_tray
from testbed.factories import tray_ip_prefix
from testbed.processes import free_port

NET = f"{tray_ip_prefix(12)}.250"  # moved by TEST_TRAY_IP_BASE like every suite's trays


class Tray:
    def __init__(
        self,
        root: Path,
        index: int,
        ip: str,
        nodes: list[str],
        ports: tuple[int, int],
        **config: Any,
    ) -> None:
        self.root, self.index, self.ip, self.ports = root, index, ip, ports
        self.hostname = f"tray-{index}"
        prepare_tray(root, TrayFacts(hostname=self.hostname, ip=ip, cluster_uuid="", clique_id=0))
        ensure_imex_mgmt(root)  # as the agent does before a start
        self.config = root / "etc/nvidia-imex/config.cfg"
        self.nodes_file = self.config.parent / "nodes_config.cfg"
        self.log_path = root / "var/log/imex.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.write_nodes(nodes)
        settings = {
            "DAEMONIZE": 0,
            "SERVER_PORT": ports[0],
            "BIND_INTERFACE_IP": ip,
            "IMEX_CMD_ENABLED": 1,
            "IMEX_CMD_PORT": ports[1],
            "IMEX_CMD_BIND_INTERFACE_IP": ip,
            "IMEX_NODE_CONFIG_FILE": f"{self.nodes_file}  # comments are ignored",
            "IMEX_WAIT_FOR_QUORUM": "RECOVERY",
            "IMEX_NODE_DISCONNECTED_GRACE_TIME": -1,
            "LOG_LEVEL": 4,
            "LOG_FILE_NAME": self.log_path,
            **config,
        }
        self.config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.proc: subprocess.Popen | None = None

    # --- the world ------------------------------------------------------------------------
    def write_nodes(self, nodes: list[str]) -> None:
        self.nodes_file.parent.mkdir(parents=True, exist_ok=True)
        self.nodes_file.write_text("".join(f"{n}\n" for n in nodes))

    def write_hosts(self, names: dict[str, str]) -> None:
        """The tray's /etc/hosts: name → IP (plus localhost, as every host has)."""
        lines = ["127.0.0.1\tlocalhost"] + [f"{ip}\t{name}" for name, ip in names.items()]
        (self.root / "etc/hosts").write_text("\n".join(lines) + "\n")

    # --- the daemon -----------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """A plain child on the host: it resolves names through the tray's etc/hosts."""
        return {**os.environ, "IMEX_EMU_HOSTS": "etc/hosts"}

    def start(self) -> subprocess.Popen:
        self.proc = subprocess.Popen(
            [IMEX_BIN, "-c", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        return self.proc

    def run_to_exit(self, timeout: float = 20) -> subprocess.CompletedProcess:
        """Start a daemon that is expected to exit (e.g. refuse to start)."""
        return subprocess.run(
            [IMEX_BIN, "-c", str(self.config)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """kill -9: an unclean exit, no goodbye to the peers."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM: a graceful shutdown."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def starts(self) -> int:
        return daemon_starts(self.root)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    # --- nvidia-imex-ctl --------------------------------------------------------------------
    def ctl(self, *flags: str) -> str:
        done = subprocess.run(
            [IMEX_CTL_BIN, "-c", str(self.config), *flags],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        return done.stdout

    def state(self) -> str:
        return self.ctl("-q").strip()

    def domain(self) -> dict[str, Any]:
        text = self.ctl("-N", "-j")
        return json.loads(text) if text else {}

    def cell(self, peer: int) -> str:
        """This daemon's connection to `peer`, as `-N -j` words it (e.g. CONNECTED)."""
        node = self.domain().get("nodes", {}).get(str(self.index), {})
        return node.get("connections", {}).get(str(peer), {}).get("status", "")

    def wait(self, what: str, probe: Any, want: Any, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            seen = probe()
            if seen == want:
                return
            time.sleep(0.05)
        raise AssertionError(
            f"{self.ip}: {what} never became {want!r} (last {seen!r})\n"
            f"{self.ctl('-N')}\n--- log ---\n{self.log()[-3000:]}"
        )

    def wait_state(self, state: str, timeout: float = 20) -> None:
        self.wait("-q", self.state, state, timeout)

    def wait_domain(self, status: str, timeout: float = 20) -> None:
        self.wait("domain state", lambda: self.domain().get("status"), status, timeout)

    def wait_cell(self, peer: int, status: str, timeout: float = 20) -> None:
        self.wait(f"connection to node {peer}", lambda: self.cell(peer), status, timeout)


def make_trays(
    tmp_path: Path, count: int, *, nodes: list[str] | None = None, **config: Any
) -> list[Tray]:
    """`count` trays on NET.1…, one port pair for all; nodes file = their IPs unless given."""
    ips = [f"{NET}.{i + 1}" for i in range(count)]
    ports = (free_port(), free_port())
    listed = nodes or ips
    return [Tray(tmp_path / f"t{i}", i, ip, listed, ports, **config) for i, ip in enumerate(ips)]


def stop_all(trays: list[Tray]) -> None:
    for tray in trays:
        if tray.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(tray.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            tray.proc.wait(10)  # type: ignore[union-attr]
