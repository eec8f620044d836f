"""Membership without restarts, NVIDIA's newer way: stable names in the nodes file, a hosts
mapping per tray, SIGUSR1 to re-resolve (at most one every 5 s) — and network cuts."""

from __future__ import annotations

import signal
import time

import pytest

from testbed.emulator.tray import set_faults

SLOTS = [f"compute-domain-daemon-{i:04d}" for i in range(4)]


@pytest.fixture
def named(emulated_trays):
    """Four trays whose nodes file lists four stable names; only three are mapped yet."""
    trays = emulated_trays(4, nodes=SLOTS)
    mapping = {SLOTS[i]: trays[i].ip for i in range(3)}
    for tray in trays:
        tray.write_hosts(mapping)
    return trays


def start_mapped(named) -> None:
    """Start the three mapped trays and wait until each is connected to the other two."""
    for tray in named[:3]:
        tray.start()
    for tray in named[:3]:
        for other in named[:3]:
            if other is not tray:
                tray.wait_cell(other.index, "CONNECTED")


def test_names_resolve_through_the_trays_hosts_file_and_an_unmapped_one_is_unreachable(named):
    start_mapped(named)
    doc = named[0].domain()
    assert doc["nodes"]["1"]["host"] == SLOTS[1]  # shown as the nodes file names it
    assert doc["nodes"]["0"]["connections"]["3"]["status"] == "NEVER_CONNECTED"
    assert doc["nodes"]["3"]["status"] == "UNAVAILABLE"
    assert {c["status"] for c in doc["nodes"]["3"]["connections"].values()} == {"INVALID"}
    assert doc["status"] == "DEGRADED"  # a listed node is missing: never UP


def test_sigusr1_adds_a_member_without_restarting_the_others(named):
    start_mapped(named)
    mapping = {SLOTS[i]: named[i].ip for i in range(4)}
    for tray in named:
        tray.write_hosts(mapping)
    named[3].start()
    named[3].wait_state("READY")
    time.sleep(0.5)
    # The newcomer resolved every name at its start and called everyone; the others have
    # not re-resolved its name yet, so they cannot call it back.
    assert named[0].cell(3) == "NEVER_CONNECTED"
    for tray in named[:3]:
        tray.signal(signal.SIGUSR1)
    for tray in named:
        tray.wait_domain("UP")
    assert [t.starts() for t in named] == [1, 1, 1, 1]
    for tray in named[:3]:
        log = tray.log()
        assert "names re-resolved, 1 address(es) changed" in log
        assert "RECOVERING" not in log and "clean up triggered" not in log


def test_a_member_leaves_and_another_tray_takes_its_name(named):
    start_mapped(named)
    named[2].stop()  # its workload is gone: graceful stop, peers clean up at once
    named[0].wait_cell(2, "DISCONNECTED")
    # slot 2 now maps to tray 3; only trays 0 and 1 are told (SIGUSR1)
    mapping = {SLOTS[0]: named[0].ip, SLOTS[1]: named[1].ip, SLOTS[2]: named[3].ip}
    for tray in named:
        tray.write_hosts(mapping)
    named[3].write_nodes(SLOTS)
    named[3].start()
    named[3].wait_state("READY")
    for tray in named[:2]:
        tray.signal(signal.SIGUSR1)
    named[0].wait_cell(2, "CONNECTED")
    named[1].wait_cell(2, "CONNECTED")
    assert named[0].domain()["nodes"]["2"]["status"] == "READY"
    assert [t.starts() for t in named[:2]] == [1, 1]
    assert "connection to node 1" not in named[0].log().split("SIGUSR1")[1]  # undisturbed


def test_sigusr1_is_processed_at_most_once_every_five_seconds(named):
    start_mapped(named)
    for _ in range(20):  # a storm
        named[0].signal(signal.SIGUSR1)
        time.sleep(0.02)
    named[0].wait("a processed SIGUSR1", lambda: "names re-resolved" in named[0].log(), True)
    # the hosts file changes just after: a signal within the window is ignored...
    mapping = {SLOTS[i]: named[i].ip for i in range(4)}
    for tray in named:
        tray.write_hosts(mapping)
    named[3].start()
    named[3].wait_state("READY")
    named[0].signal(signal.SIGUSR1)
    time.sleep(0.5)
    assert named[0].cell(3) == "NEVER_CONNECTED"
    log = named[0].log()
    assert log.count("names re-resolved") == 1
    assert log.count("SIGUSR1 ignored") >= 10  # each arrival within the window is dropped
    assert named[0].alive() and named[0].starts() == 1
    # ...and one after the window is processed
    deadline = time.monotonic() + 15
    while named[0].log().count("names re-resolved") < 2 and time.monotonic() < deadline:
        named[0].signal(signal.SIGUSR1)
        time.sleep(1)
    named[0].wait_cell(3, "CONNECTED")


def test_cut_traffic_is_recovering_and_restored_traffic_reconnects_without_restarts(emulated_trays):
    trays = emulated_trays(3)  # grace -1
    for tray in trays:
        tray.start()
    trays[0].wait_domain("UP")
    set_faults(trays[0].root, {"cut_peers": [trays[2].ip]})  # the world: a network blip
    trays[0].wait_cell(2, "RECOVERING")
    trays[2].wait_cell(0, "RECOVERING")
    assert trays[1].domain()["status"] == "DEGRADED"
    time.sleep(2)
    assert trays[0].cell(2) == "RECOVERING"  # grace -1: nothing cleaned up
    set_faults(trays[0].root, {})
    for tray in trays:
        tray.wait_domain("UP")
    assert [t.starts() for t in trays] == [1, 1, 1]
    for tray in (trays[0], trays[2]):
        log = tray.log()
        assert "reconnected (same instance): nothing to clean up" in log
        assert "clean up triggered" not in log


def test_a_cut_longer_than_the_grace_time_is_cleaned_up(emulated_trays):
    trays = emulated_trays(2, IMEX_NODE_DISCONNECTED_GRACE_TIME=1)
    for tray in trays:
        tray.start()
    trays[0].wait_domain("UP")
    set_faults(trays[1].root, {"cut_peers": [trays[0].ip]})
    trays[0].wait_cell(1, "RECOVERING")
    trays[0].wait_cell(1, "DISCONNECTED", timeout=10)
    trays[1].wait_cell(0, "DISCONNECTED", timeout=10)
    set_faults(trays[1].root, {})
    trays[0].wait_domain("UP")
    assert "not back within the grace time (1 s)" in trays[0].log()
    assert [t.starts() for t in trays] == [1, 1]


def test_an_unmapped_name_is_looked_up_in_dns_and_a_sentinel_one_is_not(emulated_trays):
    """What NVIDIA's users met: every name of the nodes file that /etc/hosts lacks goes to
    DNS at each resolve. A slot mapped to an address nobody listens on is as unreachable,
    and asks nobody."""
    trays = emulated_trays(2, nodes=SLOTS)
    trays[0].write_hosts({SLOTS[0]: trays[0].ip, SLOTS[1]: trays[1].ip})
    unused = {SLOTS[i]: "127.0.0.2" for i in (2, 3)}
    trays[1].write_hosts({SLOTS[0]: trays[0].ip, SLOTS[1]: trays[1].ip, **unused})
    for tray in trays:
        tray.start()
    trays[0].wait_cell(1, "CONNECTED")
    trays[1].wait_cell(0, "CONNECTED")
    assert trays[1].cell(2) == "NEVER_CONNECTED"  # the sentinel answers nobody
    looked_up = [line for line in trays[0].log().splitlines() if "looked up in DNS" in line]
    assert {s for s in SLOTS[2:] if any(s in line for line in looked_up)} == set(SLOTS[2:])
    assert "looked up in DNS" not in trays[1].log()
