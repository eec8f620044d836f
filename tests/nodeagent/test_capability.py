"""The driver's fabric-imex-mgmt capability: found under the tray's /proc, its device made
before nvidia-imex starts, and a tray without one named as a condition, never a crash."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentwire.messages import ConditionType
from nodeagent.driver import CapabilityError, DriverRoot, ensure_imex_mgmt, imex_mgmt
from nodeagent.probe import probe
from testbed.emulator.tray import GpuFacts, TrayFacts, prepare_tray
from tests.nodeagent.emulated import make_trays


def facts(*, minor: int | None = 4323) -> TrayFacts:
    return TrayFacts(
        hostname="gb-r07-t05",
        ip="127.12.7.5",
        cluster_uuid="5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11",
        clique_id=1,
        gpus=[GpuFacts(index=0, uuid="GPU-0")],
        imex_mgmt_minor=minor,
    )


def probed_conditions(root: Path) -> dict[str, dict]:
    found = probe(
        proc_devices=root / "proc/devices",
        hostname="gb-r07-t05",
        ip="127.12.7.5",
        driver=DriverRoot(root),
        facts_file=root / "run/nvidia-emu/fabric.json",
    )
    return {c["type"]: c for c in found.conditions}


def test_the_minor_comes_from_the_capability_file_and_the_major_from_nvidia_caps(tmp_path):
    root = prepare_tray(tmp_path, facts(minor=77))
    cap = imex_mgmt(root)
    assert (cap.major, cap.minor, cap.mode) == (508, 77, 0o400)
    assert cap.node(root) == root / "dev/nvidia-caps/nvidia-cap77"


def test_the_device_is_made_with_the_capabilitys_numbers_and_a_wrong_one_replaced(tmp_path):
    root = prepare_tray(tmp_path, facts())
    path = ensure_imex_mgmt(root)
    st = path.lstat()
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o400
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (508, 4323)
    assert ensure_imex_mgmt(root) == path and path.lstat().st_ino == st.st_ino  # kept
    path.unlink()
    os.mknod(path, stat.S_IFCHR | 0o400, os.makedev(508, 1))  # a stale node: wrong minor
    ensure_imex_mgmt(root)
    assert os.minor(path.lstat().st_rdev) == 4323


def test_a_driver_without_the_capability_is_a_blocking_tray_condition(tmp_path):
    root = prepare_tray(tmp_path, facts(minor=None))
    with pytest.raises(CapabilityError, match="no IMEX management capability"):
        ensure_imex_mgmt(root)
    condition = probed_conditions(root)[ConditionType.IMEX_MGMT_MISSING]
    assert condition["blocking"]
    assert "proc/driver/nvidia/capabilities/fabric-imex-mgmt" in condition["message"]
    assert not (root / "dev/nvidia-caps").exists()


def test_a_tray_with_the_capability_has_no_such_condition(tmp_path):
    root = prepare_tray(tmp_path, facts())
    assert ConditionType.IMEX_MGMT_MISSING not in probed_conditions(root)


def test_the_emulated_daemon_will_not_start_without_the_device(tmp_path):
    (tray,) = make_trays(tmp_path, 1)
    (tray.root / "dev/nvidia-caps/nvidia-cap4323").unlink()
    done = tray.run_to_exit()
    assert done.returncode != 0
    assert "IMEX management device" in done.stdout + done.stderr
