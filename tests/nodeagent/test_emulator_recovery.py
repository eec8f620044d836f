"""The emulator is as unkind as IMEX when daemons die: grace time, R and D, recovery quorum.

NVIDIA's IMEX guide ("Connections, Quorum, and Clean up"): a lost connection is not cleaned
up until IMEX_NODE_DISCONNECTED_GRACE_TIME has passed (-1: never); a peer that comes back
as a new instance is cleaned up at once; after an unclean exit a daemon waits for the
nodes that had imported from it (persist.dat) unless IMEX_WAIT_FOR_QUORUM=NONE.
"""

from __future__ import annotations

import time


def formed(emulated_trays, count: int = 3, **config):
    trays = emulated_trays(count, **config)
    for tray in trays:
        tray.start()
    for tray in trays:
        tray.wait_domain("UP")
    return trays


def test_a_killed_peer_is_recovering_until_the_grace_time_then_disconnected(emulated_trays):
    trays = formed(emulated_trays, IMEX_NODE_DISCONNECTED_GRACE_TIME=2)
    trays[2].kill()
    trays[0].wait_cell(2, "RECOVERING", timeout=5)
    assert trays[0].domain()["status"] == "DEGRADED"
    assert "clean up triggered for node 2" not in trays[0].log()
    trays[0].wait_cell(2, "DISCONNECTED", timeout=10)
    assert "not back within the grace time (2 s)" in trays[0].log()
    assert trays[0].state() == "READY"


def test_with_grace_minus_one_a_lost_peer_stays_recovering_until_it_returns(emulated_trays):
    trays = formed(emulated_trays)  # IMEX_NODE_DISCONNECTED_GRACE_TIME=-1, NVIDIA's default
    trays[2].kill()
    trays[0].wait_cell(2, "RECOVERING", timeout=5)
    time.sleep(3)
    assert trays[0].cell(2) == "RECOVERING"  # nothing cleaned up, however long
    assert "clean up triggered" not in trays[0].log()
    # it comes back as a new instance: that is cleaned up at once, then connected
    trays[2].start()
    trays[0].wait_domain("UP")
    assert "clean up triggered for node 2" in trays[0].log()
    assert "it restarted (a new IMEX instance)" in trays[0].log()
    assert trays[2].starts() == 2


def test_after_an_unclean_exit_the_daemon_waits_for_its_former_importers(emulated_trays):
    trays = formed(emulated_trays)
    importers = (trays[2].root / "var/run/nvidia-imex/persist.dat").read_text()
    assert "Node #0:" in importers and "Node #1:" in importers
    trays[2].kill()
    trays[1].kill()  # one of its importers is gone too
    trays[2].start()
    trays[2].wait_state("WAITING_FOR_RECOVERY")
    time.sleep(1.5)
    assert trays[2].state() == "WAITING_FOR_RECOVERY"  # grace -1: it waits for good
    assert trays[2].domain()["status"] == "DOWN"
    assert "waiting for 2 former importer(s)" in trays[2].log()
    trays[1].start()  # it recovers as well (node 2 imported from it)
    trays[2].wait_state("READY")
    trays[1].wait_state("READY")
    trays[0].wait_domain("UP")
    assert "every former importer reconnected" in trays[2].log()


def test_the_recovery_wait_ends_after_the_grace_time(emulated_trays):
    trays = formed(emulated_trays, IMEX_NODE_DISCONNECTED_GRACE_TIME=2)
    trays[2].kill()
    trays[1].kill()
    trays[2].start()
    trays[2].wait_state("WAITING_FOR_RECOVERY")
    trays[2].wait_state("READY", timeout=10)
    assert "node 1 did not return within the grace time" in trays[2].log()
    assert trays[2].cell(0) == "CONNECTED" and trays[2].cell(1) == "NEVER_CONNECTED"


def test_wait_for_quorum_none_a_clean_stop_or_a_new_nodes_file_skip_recovery(emulated_trays):
    trays = formed(emulated_trays, IMEX_WAIT_FOR_QUORUM="NONE")
    trays[2].kill()
    trays[1].kill()
    trays[2].start()
    trays[2].wait_state("READY")
    assert "IMEX_WAIT_FOR_QUORUM=NONE: not waiting" in trays[2].log()
    assert "WAITING_FOR_RECOVERY" not in trays[2].log()

    # a clean shutdown leaves no importers behind: the next start serves at once
    trays[1].start()
    trays[2].wait_domain("UP")
    trays[2].stop()
    lines = (trays[2].root / "var/run/nvidia-imex/persist.dat").read_text().splitlines()
    assert len(lines) == 1  # only the nodes_config key
    text = trays[2].config.read_text().replace("=NONE", "=RECOVERY")
    trays[2].config.write_text(text)
    trays[2].start()
    trays[2].wait_state("READY")

    # a changed nodes file discards persist.dat, so there is no quorum to wait for
    trays[2].kill()
    trays[1].kill()
    trays[2].write_nodes([t.ip for t in trays] + ["127.0.0.99"])
    trays[2].start()
    trays[2].wait_state("READY")
    assert "persist.dat discarded" in trays[2].log()
