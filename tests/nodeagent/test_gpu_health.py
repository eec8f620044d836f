"""The agent reads its GPUs' health through NVML (the real calls, against the stand-in
library) or, on an emulated tray, from fabric.json, and sends it with one report a while."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentwire.messages import STATUS_REPORT_SCHEMA
from nodeagent.config import AgentConfig
from nodeagent.gpuhealth import FileHealth, GpuHealth
from nodeagent.report import Reporter
from nodeagent.traylog import TrayLog
from testbed.emulator.tray import (
    EMU_DIR,
    GpuFacts,
    TrayFacts,
    heal_gpu,
    prepare_tray,
    sicken_gpu,
)

CLUSTER = "5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11"
CONF = f"""driver 580.82.07
vbios 97.00.B9.00.12
gpu GPU-aaaa 3 0 1 {CLUSTER}
gpu GPU-bbbb 3 0 1 {CLUSTER}
health 0 44 612000 3 0 0 0 0 0
health 1 91 700500 12 1 250 7 3 1
xid 1 79
"""


def read_in_a_process(driver_root: Path, conf: str, tmp_path: Path) -> list[Any]:
    """Two samples through the agent's NVML reader in a fresh process, an XID happening
    between them; and the probe's facts (the VBIOS)."""
    path = tmp_path / "nvml.conf"
    path.write_text(conf)
    code = (
        "import json, sys; from pathlib import Path;"
        "from nodeagent.driver import DriverRoot; from nodeagent.gpuhealth import NvmlHealth;"
        "from nodeagent.probe import probe;"
        "h = NvmlHealth(DriverRoot(Path(sys.argv[1]))); first = h.read();"
        "open(sys.argv[2], 'a').write('xid 1 48\\n'); second = h.read(); h.close();"
        "f = probe(proc_devices=Path('/proc/devices'), hostname='t', ip='',"
        " driver=DriverRoot(Path(sys.argv[1])));"
        "print(json.dumps([first, second, [g.document() for g in f.gpus]]))"
    )
    env = {**os.environ, "NVML_STANDIN_CONF": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(driver_root), str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout)


def test_nvml_gives_each_gpus_readings_and_its_xid_events_once_each(nvml_standin, tmp_path):
    first, second, facts = read_in_a_process(nvml_standin, CONF, tmp_path)
    cool, sick = first
    assert (cool["uuid"], cool["temperature_c"], cool["power_mw"]) == ("GPU-aaaa", 44, 612000)
    assert (cool["xid_count"], cool["last_xid"], cool["ecc_corrected"]) == (0, 0, 3)
    assert sick["nvlink_crc_flit_errors"] == 250 and sick["nvlink_recovery_errors"] == 1
    assert (sick["xid_count"], sick["last_xid"], sick["ecc_uncorrected"]) == (1, 79, 1)
    # The next sample: the XID seen once is not counted again, the new one is.
    assert (second[1]["xid_count"], second[1]["last_xid"]) == (2, 48)
    assert second[0]["xid_count"] == 0
    assert [g["vbios_version"] for g in facts] == ["97.00.B9.00.12"] * 2


def test_a_vbios_nvml_does_not_give_is_empty(nvml_standin, tmp_path):
    conf = "".join(line for line in CONF.splitlines(True) if not line.startswith("vbios"))
    facts = read_in_a_process(nvml_standin, conf, tmp_path)[2]
    assert [g["vbios_version"] for g in facts] == ["", ""]


def tray(tmp_path: Path) -> Path:
    facts = TrayFacts(
        hostname="gb-r07-t03",
        ip="127.12.7.3",
        cluster_uuid=CLUSTER,
        clique_id=1,
        gpus=[GpuFacts(index=i, uuid=f"GPU-{i}") for i in range(4)],
    )
    return prepare_tray(tmp_path / "tray", facts)


def test_an_emulated_gpu_made_sick_shows_xids_heat_and_rising_nvlink_errors(tmp_path):
    root = tray(tmp_path)
    reader = FileHealth(root / EMU_DIR / "fabric.json")
    before = reader.read()
    assert [g["xid_count"] for g in before] == [0, 0, 0, 0]
    assert all(g["nvlink_crc_flit_errors"] == 0 and g["temperature_c"] < 60 for g in before)
    sicken_gpu(root, 2, xids=(79,), nvlink_errors_per_s=100.0, temperature_c=93)
    doc = json.loads((root / EMU_DIR / "fabric.json").read_text())
    doc["gpus"][2]["health"]["since"] = time.time() - 10  # it began ten seconds ago
    (root / EMU_DIR / "fabric.json").write_text(json.dumps(doc))
    sick = reader.read()[2]
    assert (sick["xid_count"], sick["last_xid"], sick["temperature_c"]) == (1, 79, 93)
    assert 900 <= sick["nvlink_crc_flit_errors"] <= 1100
    later = reader.read()[2]["nvlink_crc_flit_errors"]
    assert later >= sick["nvlink_crc_flit_errors"]
    heal_gpu(root, 2)
    healed = reader.read()[2]
    assert healed["temperature_c"] < 60 and healed["nvlink_crc_flit_errors"] == 0
    assert healed["xid_count"] == 1  # XIDs that happened stay counted


def test_a_reading_nvml_does_not_give_is_null_never_zero(tmp_path):
    root = tray(tmp_path)
    doc = json.loads((root / EMU_DIR / "fabric.json").read_text())
    doc["gpus"][0]["health"] = {"temperature_c": 40}  # no power, ECC or NVLink counters
    (root / EMU_DIR / "fabric.json").write_text(json.dumps(doc))
    first = FileHealth(root / EMU_DIR / "fabric.json").read()[0]
    assert first["temperature_c"] == 40 and first["power_mw"] is None
    assert first["ecc_uncorrected"] is None and first["nvlink_replay_errors"] is None


def test_a_sample_is_due_once_an_interval_and_only_marked_sent_when_sent(tmp_path):
    root = tray(tmp_path)
    health = GpuHealth(None, root / EMU_DIR / "fabric.json", 30.0)  # type: ignore[arg-type]
    assert len(health.due(100.0) or []) == 4
    assert health.due(101.0) is not None  # not sent yet: due again
    health.sent(101.0)
    assert health.due(120.0) is None and health.due(131.5) is not None
    off = GpuHealth(None, root / EMU_DIR / "fabric.json", 0)  # type: ignore[arg-type]
    assert off.due(1e9) is None


class RecordingClient:
    """Stands in for the portal: records what the reporter sends."""

    link_error = ""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def report(self, report: dict[str, Any], *, request_id: str = "") -> None:
        self.sent.append(report)


def test_a_report_carrying_gpu_health_goes_out_and_does_not_make_the_next_one_a_change(
    tmp_path,
):
    client = RecordingClient()
    reporter = Reporter(
        AgentConfig(portal="http://x", join_token="", root=tmp_path, settle_s=0),
        client,  # type: ignore[arg-type]
        TrayLog("t"),
    )
    report = reporter.doc(uid=None, generation=0, step="idle", clean=True)
    assert reporter.send(report)
    assert not reporter.send(dict(report))  # unchanged, heartbeat not due
    sampled = dict(report, gpu_health=FileHealth(tray(tmp_path) / EMU_DIR / "fabric.json").read())
    assert reporter.send(sampled)  # type: ignore[arg-type]
    assert not reporter.send(dict(report))  # the tray's state did not change
    assert [("gpu_health" in r) for r in client.sent] == [False, True]
    import jsonschema

    jsonschema.validate(client.sent[1], STATUS_REPORT_SCHEMA)
