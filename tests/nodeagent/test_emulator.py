"""The emulated nvidia-imex / nvidia-imex-ctl behave as IMEX-FACTS.md and NVIDIA document."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from testbed.emulator.tray import IMEX_BIN, IMEX_CTL_BIN, set_faults, write_driver_version
from tests.nodeagent.emulated import NET


@pytest.fixture
def domain(emulated_trays):
    """Three trays on their own loopback IPs, one shared port pair, not started yet."""
    return emulated_trays(3)


def start_all(trays, state: str = "READY") -> None:
    for tray in trays:
        tray.start()
    for tray in trays:
        tray.wait_state(state)


def test_daemons_connect_to_every_peer_and_the_domain_is_up(domain):
    start_all(domain)
    assert domain[0].ctl("-q") == "READY\n"  # exactly one word
    for tray in domain:
        tray.wait_domain("UP")

    text = domain[0].ctl("-N")
    assert "Connectivity Table Legend:" in text and "!M! - Node map mismatch" in text
    assert f"Node #0   - {NET}.1" in text and "READY" in text
    assert text.rstrip().endswith("Domain State: UP")

    doc = domain[1].domain()
    assert doc["status"] == "UP"
    assert set(doc["nodes"]) == {"0", "1", "2"}
    node = doc["nodes"]["1"]
    assert {"status", "host", "version", "changed", "connections"} <= set(node)
    assert node["connections"]["0"] == {"host": f"{NET}.1", "status": "CONNECTED"}
    assert "hostName" not in node
    with_names = domain[1].ctl("-N", "-j", "-H")
    assert '"hostName": "tray-1"' in with_names and '"hostName": "tray-2"' in with_names


def test_ready_is_per_node_even_while_a_peer_never_connected(domain):
    """`-q` is the local daemon: READY once it serves, whatever its peers do."""
    start_all(domain[:2])
    doc = domain[0].domain()
    assert domain[0].state() == "READY"
    assert doc["status"] == "DEGRADED"  # the domain is -N's business
    assert doc["nodes"]["0"]["connections"]["2"]["status"] == "NEVER_CONNECTED"
    assert doc["nodes"]["2"]["status"] == "UNAVAILABLE"
    # a node nobody can reach has no row: every cell Invalid
    assert {c["status"] for c in doc["nodes"]["2"]["connections"].values()} == {"INVALID"}
    domain[2].start()
    domain[0].wait_domain("UP")


def test_a_gracefully_stopped_peer_is_disconnected_at_once(domain):
    start_all(domain)
    domain[0].wait_domain("UP")
    assert domain[2].stop() == 0  # SIGTERM: it tells its peers, who clean up at once
    domain[0].wait_cell(2, "DISCONNECTED", timeout=5)
    doc = domain[0].domain()
    assert doc["status"] == "DEGRADED"
    assert doc["nodes"]["2"]["status"] == "UNAVAILABLE"
    assert domain[0].state() == "READY"  # still serving the peers it has
    assert "clean up triggered for node 2" in domain[0].log()
    assert "SHUTTING_DOWN" in domain[2].log()


def test_a_node_map_mismatch_is_reported_as_such(domain):
    domain[2].write_nodes([f"{NET}.3", f"{NET}.2", f"{NET}.1"])  # same trays, other order
    start_all(domain)
    domain[0].wait_cell(2, "NODE_MAP_MISMATCH")
    assert domain[0].domain()["status"] == "DEGRADED"
    assert "!M!" in domain[0].ctl("-N")


def test_a_version_mismatch_between_trays_is_reported_as_such(domain):
    set_faults(domain[1].root, {"version": "570.86.10"})  # a tray on another driver release
    start_all(domain)
    domain[0].wait_cell(1, "VERSION_MISMATCH")
    assert domain[0].domain()["status"] == "DEGRADED"
    assert "Version: 570.86.10" in domain[1].ctl("-N")


def test_a_refused_peer_never_connects(domain):
    set_faults(domain[0].root, {"refuse_peers": [f"{NET}.2"]})
    start_all(domain)
    domain[0].wait_cell(1, "CONNECTED")  # only its incoming side is refused
    domain[2].wait_cell(1, "CONNECTED")
    time.sleep(0.5)
    assert domain[1].cell(0) == "NEVER_CONNECTED"
    assert domain[2].domain()["status"] == "DEGRADED"


def test_a_second_daemon_on_the_same_tray_fails_in_use(domain):
    domain[0].start()
    domain[0].wait_state("READY")
    second = domain[0].run_to_exit()
    assert second.returncode != 0 and "NV_ERR_IN_USE" in second.stderr
    assert domain[0].alive() and domain[0].starts() == 1


def test_sighup_reloads_nothing_and_dumps_the_verbose_log(emulated_trays):
    (tray,) = emulated_trays(1, LOG_LEVEL=2)  # errors only, as the agent configures it
    tray.start()
    tray.wait_state("READY")
    assert "INIT_GPU -> READY" not in tray.log()  # INFO is kept in memory, not logged
    old = tray.config.read_text()
    tray.config.write_text(old.replace("IMEX_CMD_ENABLED=1", "IMEX_CMD_ENABLED=0"))
    tray.signal(signal.SIGHUP)
    tray.wait("the verbose buffer in the log", lambda: "INIT_GPU -> READY" in tray.log(), True)
    tray.config.write_text(old)
    assert tray.alive() and tray.state() == "READY"  # still serving commands: not reloaded
    assert "configuration not reloaded" in tray.log()


def test_fault_knobs_delay_the_start_and_crash_the_daemon(domain):
    set_faults(domain[0].root, {"start_delay_s": 2, "crash_after_s": 4})
    proc = domain[0].start()
    domain[0].wait("the tray taken", domain[0].starts, 1)  # its lock held: it is running
    assert domain[0].state() == "UNAVAILABLE"  # yet not answering while it initialises
    domain[0].wait_state("READY")
    assert proc.wait(10) != 0  # crashed, uncleanly
    assert "crash_after_s" in domain[0].log()


@pytest.mark.parametrize(
    ("world", "words"),
    [
        ("driver", ["570.86.10", "580.82.07", "does not match"]),
        ("imex_version", ["590.1.1", "580.82.07", "does not match"]),
        ("no driver", ["no NVIDIA kernel driver loaded"]),
    ],
)
def test_the_daemon_refuses_to_start_on_another_driver_version(domain, world, words):
    tray = domain[0]
    if world == "driver":  # the driver was upgraded, the nvidia-imex package was not
        write_driver_version(tray.root, "570.86.10")
    elif world == "imex_version":
        set_faults(tray.root, {"imex_version": "590.1.1"})
    else:
        (tray.root / "proc/driver/nvidia/version").unlink()
    done = tray.run_to_exit()
    assert done.returncode == 1
    assert all(word in done.stderr for word in words), done.stderr
    assert "CRITICAL" in tray.log() and tray.state() == "UNAVAILABLE"


def test_the_ctl_speaks_tcp_and_unix_sockets_and_explains_what_it_cannot_do(
    emulated_trays, tmp_path
):
    sock = tmp_path / "imex.sock"
    (tray,) = emulated_trays(1, IMEX_CMD_UNIX_DOMAIN_PATH=sock)
    assert tray.state() == "UNAVAILABLE"  # no daemon yet
    tray.start()
    tray.wait_state("READY")

    def ctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([IMEX_CTL_BIN, *args], capture_output=True, text=True, timeout=20)

    assert ctl("-u", str(sock), "-q").stdout == "READY\n"
    assert '"status": "UP"' in ctl("-u", str(sock), "-N", "-j").stdout
    assert ctl("-i", tray.ip, str(tray.ports[1]), "-q").stdout == "READY\n"
    # a config whose command service is only the unix socket: -c goes there too
    text = tray.config.read_text()
    port_line = next(line for line in text.splitlines() if line.startswith("IMEX_CMD_PORT="))
    tray.config.write_text(text.replace(port_line, "IMEX_CMD_PORT="))
    assert ctl("-c", str(tray.config), "-q").stdout == "READY\n"
    tray.stop()
    assert not sock.exists()  # removed at shutdown
    gone = ctl("-u", str(sock), "-q")
    assert gone.returncode == 1 and gone.stdout == "UNAVAILABLE\n" and str(sock) in gone.stderr
    assert "usage" in ctl("-h").stdout
    assert ctl("-x").returncode == 2


def test_without_a_config_file_the_daemon_says_so(tmp_path):
    done = subprocess.run(
        [IMEX_BIN, "-c", str(tmp_path / "missing.cfg")], capture_output=True, text=True
    )
    assert done.returncode == 1 and "missing.cfg" in done.stderr
