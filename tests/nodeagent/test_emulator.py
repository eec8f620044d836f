"""The emulated nvidia-imex / nvidia-imex-ctl behave as IMEX-FACTS.md documents."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.emulator.tray import IMEX_BIN, IMEX_CTL_BIN, set_faults
from tests.factories import tray_ip_prefix
from tests.support.processes import free_port

NET = f"{tray_ip_prefix(12)}.250"  # moved by TEST_TRAY_IP_BASE like every suite's trays


class Tray:
    def __init__(self, root: Path, ip: str, nodes: list[str], port: int, cmd_port: int) -> None:
        self.root, self.ip = root, ip
        self.config = root / "etc/nvidia-imex/config.cfg"
        self.config.parent.mkdir(parents=True, exist_ok=True)
        nodes_file = self.config.parent / "nodes_config.cfg"
        nodes_file.write_text("".join(f"{n}\n" for n in nodes))
        self.config.write_text(
            "DAEMONIZE=0\n"
            f"SERVER_PORT={port}\nBIND_INTERFACE_IP={ip}\n"
            f"IMEX_CMD_ENABLED=1\nIMEX_CMD_PORT={cmd_port}\nIMEX_CMD_BIND_INTERFACE_IP={ip}\n"
            f"IMEX_NODE_CONFIG_FILE={nodes_file}  # comments are ignored\n"
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        self.proc = subprocess.Popen(
            [IMEX_BIN, "-c", str(self.config)], stderr=subprocess.PIPE, text=True
        )
        return self.proc

    def ctl(self, *flags: str) -> str:
        done = subprocess.run(
            [IMEX_CTL_BIN, "-c", str(self.config), *flags],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return done.stdout

    def wait_state(self, state: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ctl("-q").strip() == state:
                return
            time.sleep(0.05)
        raise AssertionError(
            f"{self.ip} never reached {state}: {self.ctl('-q')!r}\n{self.ctl('-N')}\n{self.log()}"
        )

    def wait_domain(self, status: str, timeout: float = 5) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if json.loads(self.ctl("-N", "-j") or "{}").get("status") == status:
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.ip}: domain never {status}: {self.ctl('-N')}")

    def log(self) -> str:
        """What the daemon printed, once it has exited (a live one keeps its pipe)."""
        if self.proc is None or self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read() if self.proc.stderr else ""


@pytest.fixture
def domain(tmp_path) -> Iterator[list[Tray]]:
    """Three trays on their own loopback IPs, one shared port pair, not started yet."""
    ips = [f"{NET}.{i}" for i in (1, 2, 3)]
    port, cmd_port = free_port(), free_port()
    trays = [Tray(tmp_path / f"t{i}", ip, ips, port, cmd_port) for i, ip in enumerate(ips)]
    yield trays
    for tray in trays:
        if tray.proc and tray.proc.poll() is None:
            tray.proc.kill()
            tray.proc.wait(5)


def test_daemons_connect_to_every_peer_and_become_ready(domain):
    for tray in domain:
        tray.start()
    for tray in domain:
        tray.wait_state("READY")
    assert domain[0].ctl("-q") == "READY\n"  # exactly one word
    # Each node's row of the matrix reaches the others in its next status message.
    for tray in domain:
        tray.wait_domain("UP")

    text = domain[0].ctl("-N")
    assert "Connectivity Table Legend:" in text and "!M! - Node map mismatch" in text
    assert f"Node #0   - {NET}.1" in text and "READY" in text
    assert text.rstrip().endswith("Domain State: UP")

    doc = json.loads(domain[1].ctl("-N", "-j"))
    assert doc["status"] == "UP"
    assert set(doc["nodes"]) == {"0", "1", "2"}
    node = doc["nodes"]["1"]
    assert {"status", "host", "version", "changed", "connections"} <= set(node)
    assert node["connections"]["0"] == {"host": f"{NET}.1", "status": "CONNECTED"}
    assert (
        "hostName" not in node
        and "hostName" in json.loads(domain[1].ctl("-N", "-j", "-H"))["nodes"]["1"]
    )


def test_a_lost_peer_shows_as_disconnected_and_the_domain_degraded(domain):
    for tray in domain:
        tray.start()
    for tray in domain:
        tray.wait_state("READY")
    domain[2].proc.send_signal(signal.SIGTERM)  # graceful
    assert domain[2].proc.wait(5) == 0
    time.sleep(0.3)
    doc = json.loads(domain[0].ctl("-N", "-j"))
    assert doc["status"] == "DEGRADED"
    assert doc["nodes"]["0"]["connections"]["2"]["status"] == "DISCONNECTED"
    assert doc["nodes"]["2"]["status"] == "UNAVAILABLE"
    assert domain[0].ctl("-q") == "READY\n"  # still serving the peers it has


def test_a_node_map_mismatch_is_reported_as_such(domain):
    domain[2].config.parent.joinpath("nodes_config.cfg").write_text(
        f"{NET}.3\n{NET}.2\n{NET}.1\n"  # same trays, other order: indexes differ
    )
    for tray in domain:
        tray.start()
    time.sleep(1.0)
    assert domain[0].ctl("-q").strip() == "WAITING_FOR_PEERS"
    doc = json.loads(domain[0].ctl("-N", "-j"))
    assert doc["nodes"]["0"]["connections"]["2"]["status"] == "NODE_MAP_MISMATCH"
    assert "!M!" in domain[0].ctl("-N")


def test_a_version_mismatch_is_reported_as_such(domain):
    set_faults(domain[1].root, {"version": "570.1.1"})
    for tray in domain:
        tray.start()
    time.sleep(1.0)
    doc = json.loads(domain[0].ctl("-N", "-j"))
    assert doc["nodes"]["0"]["connections"]["1"]["status"] == "VERSION_MISMATCH"
    assert domain[0].ctl("-q").strip() == "WAITING_FOR_PEERS"


def test_a_refused_peer_never_connects(domain):
    set_faults(domain[0].root, {"refuse_peers": [f"{NET}.2"]})
    for tray in domain:
        tray.start()
    domain[2].wait_state("READY")
    time.sleep(0.5)
    doc = json.loads(domain[1].ctl("-N", "-j"))
    assert doc["nodes"]["1"]["connections"]["0"]["status"] == "NEVER_CONNECTED"
    assert domain[1].ctl("-q").strip() == "WAITING_FOR_PEERS"


def test_a_second_daemon_on_the_same_tray_fails_in_use(domain):
    domain[0].start()
    domain[0].wait_state("WAITING_FOR_PEERS")
    second = subprocess.run(
        [IMEX_BIN, "-c", str(domain[0].config)], capture_output=True, text=True, timeout=10
    )
    assert second.returncode != 0 and "NV_ERR_IN_USE" in second.stderr


def test_sighup_does_not_reload_and_sigusr1_reconnects(domain):
    for tray in domain:
        tray.start()
    for tray in domain:
        tray.wait_state("READY")
    domain[0].proc.send_signal(signal.SIGHUP)
    domain[0].proc.send_signal(signal.SIGUSR1)
    time.sleep(0.5)
    assert domain[0].proc.poll() is None
    assert json.loads(domain[0].ctl("-N", "-j"))["status"] == "UP"
    domain[0].proc.send_signal(signal.SIGTERM)
    domain[0].proc.wait(5)
    log = domain[0].proc.stderr.read()
    assert "SIGHUP ignored" in log and "SIGUSR1" in log and "SHUTTING_DOWN" in log


def test_fault_knobs_delay_the_start_and_crash_the_daemon(domain):
    set_faults(domain[0].root, {"start_delay_s": 0.6, "crash_after_s": 1.2})
    started = time.monotonic()
    proc = domain[0].start()
    assert domain[0].ctl("-q").strip() == "UNAVAILABLE"
    domain[0].wait_state("WAITING_FOR_PEERS")
    assert time.monotonic() - started >= 0.6
    assert proc.wait(5) != 0  # crashed, uncleanly
    # the next instance notices the unclean exit and passes through recovery
    set_faults(domain[0].root, {})
    domain[0].start()
    domain[0].wait_state("WAITING_FOR_PEERS")
    domain[0].proc.send_signal(signal.SIGTERM)
    domain[0].proc.wait(5)
    assert "WAITING_FOR_RECOVERY" in domain[0].proc.stderr.read()


def test_the_ctl_explains_what_it_cannot_do(domain):
    tray = domain[0]
    assert tray.ctl("-q").strip() == "UNAVAILABLE"  # no daemon yet
    done = subprocess.run([IMEX_CTL_BIN, "-u", "/run/x.sock", "-q"], capture_output=True, text=True)
    assert done.returncode == 2 and "not emulated" in done.stderr
    assert "usage" in subprocess.run([IMEX_CTL_BIN, "-h"], capture_output=True, text=True).stdout
