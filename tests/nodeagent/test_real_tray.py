"""What a real tray asks of the agent's pieces: the driver root, NVML's answers, the host's
own IMEX service, NVIDIA's IMEX defaults, channel devices a non-root job can open."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agentwire.messages import ConditionType
from nodeagent.channels import Channels, cdi_spec
from nodeagent.config import Paths
from nodeagent.driver import DriverRoot
from nodeagent.files import write_atomic
from nodeagent.host import enabled_links, foreign_daemons, host_service_condition
from nodeagent.imex.files import config_values, render_config, write_config
from nodeagent.probe import Gpu, fabric_verdict, probe
from testbed.emulator.tray import GpuFacts, TrayFacts, prepare_tray

CLUSTER = "5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11"


@pytest.fixture
def tray(tmp_path: Path) -> Path:
    facts = TrayFacts(
        hostname="gb-r07-t03",
        ip="127.12.7.3",
        cluster_uuid=CLUSTER,
        clique_id=1,
        gpus=[GpuFacts(index=i, uuid=f"GPU-{i}") for i in range(4)],
    )
    return prepare_tray(tmp_path / "tray", facts)


def gpu(index: int, state: str = "COMPLETED", clique: int = 1, **kw: str) -> Gpu:
    return Gpu(index, f"GPU-{index}", "NVIDIA GB200", state, CLUSTER, clique, **kw)


# --- the fabric verdict ------------------------------------------------------------------------
def test_a_completed_agreed_fabric_is_the_trays_clique_and_settled():
    assert fabric_verdict([gpu(i) for i in range(4)]) == (CLUSTER, 1, [], True)


def test_a_registration_in_progress_holds_the_tray_back_and_is_probed_again():
    cluster, clique, conditions, settled = fabric_verdict([gpu(0), gpu(1, "IN_PROGRESS")])
    assert (cluster, clique, settled) == ("", None, False)
    (condition,) = conditions
    assert condition["type"] == ConditionType.FABRIC_NOT_READY and condition["blocking"]
    assert "GPU 1 IN_PROGRESS" in condition["message"]


def test_a_failed_registration_carries_nvmls_words():
    failed = gpu(2, "FAILED", fabric_error="Insufficient Resources")
    _, _, (condition,), settled = fabric_verdict([gpu(0), failed])
    assert condition["type"] == ConditionType.FABRIC_FAILED and not settled
    assert "GPU 2 (GPU-2): Insufficient Resources" in condition["message"]


def test_gpus_that_name_different_cliques_are_inconsistent():
    _, clique, (condition,), _ = fabric_verdict([gpu(0, clique=1), gpu(1, clique=2)])
    assert clique is None and condition["type"] == ConditionType.FABRIC_INCONSISTENT


def test_gpus_without_multi_node_nvlink_are_settled_and_cliqueless():
    pcie = Gpu(0, "GPU-0", "H100 PCIe", "NOT_SUPPORTED")
    assert fabric_verdict([pcie]) == ("", None, [], True)


def test_the_probe_never_raises_nvml_failures_are_conditions(tray: Path):
    facts_file = tray / "run/nvidia-emu/fabric.json"
    doc = json.loads(facts_file.read_text())
    write_atomic(facts_file, json.dumps(doc | {"nvml_error": "Driver Not Loaded"}))
    facts = probe(
        proc_devices=tray / "proc/nothing",
        hostname="gb-r07-t03",
        ip="127.12.7.3",
        driver=DriverRoot(tray),
        facts_file=facts_file,
    )
    kinds = {c["type"]: c["message"] for c in facts.conditions}
    assert kinds[ConditionType.NVML_UNAVAILABLE] == "NVML unavailable: Driver Not Loaded"
    assert ConditionType.IMEX_CHANNELS_MISSING in kinds  # no major in /proc/devices
    assert not facts.settled and facts.gpus == [] and facts.clique == ""


# --- NVML from the driver root -----------------------------------------------------------------
def probe_in_a_process(driver_root: Path, conf: str, tmp_path: Path) -> dict:
    """The agent's real NVML path, in a fresh process (the library stays loaded once in)."""
    (tmp_path / "nvml.conf").write_text(conf)
    code = (
        "import json, sys; from pathlib import Path;"
        "from nodeagent.driver import DriverRoot; from nodeagent.probe import probe;"
        "f = probe(proc_devices=Path('/proc/devices'), hostname='t', ip='',"
        " driver=DriverRoot(Path(sys.argv[1])));"
        "print(json.dumps({'clique': f.clique, 'driver': f.driver_version,"
        " 'gpus': [g.document() for g in f.gpus], 'conditions': f.conditions}))"
    )
    env = {**os.environ, "NVML_STANDIN_CONF": str(tmp_path / "nvml.conf")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(driver_root)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout)


def test_nvml_is_loaded_from_the_driver_root(nvml_standin: Path, tmp_path: Path):
    conf = "driver 580.82.07\n" + "".join(f"gpu GPU-{i} 3 0 5 {CLUSTER}\n" for i in range(4))
    facts = probe_in_a_process(nvml_standin, conf, tmp_path)
    assert facts["driver"] == "580.82.07" and facts["clique"] == f"{CLUSTER}.5"
    assert [g["fabric_state"] for g in facts["gpus"]] == ["COMPLETED"] * 4
    assert facts["gpus"][0]["product"] == "NVIDIA GB200"


def test_a_failed_registration_through_nvml_names_nvmls_error(nvml_standin, tmp_path):
    conf = f"driver 580.82.07\ngpu GPU-0 3 0 5 {CLUSTER}\ngpu GPU-1 3 12 5 {CLUSTER}\n"
    facts = probe_in_a_process(nvml_standin, conf, tmp_path)
    found = {c["type"]: c["message"] for c in facts["conditions"]}
    assert "GPU 1 (GPU-1): Not Found" in found[ConditionType.FABRIC_FAILED]


def test_nvml_that_cannot_be_loaded_says_where_it_looked(tmp_path: Path):
    facts = probe_in_a_process(tmp_path / "empty-root", "", tmp_path)
    found = {c["type"]: c["message"] for c in facts["conditions"]}
    assert "libnvidia-ml.so.1 is neither under the driver root" in found["NvmlUnavailable"]


def test_the_driver_roots_binaries_run_with_only_the_drivers_libraries(
    nvml_standin: Path, tmp_path: Path
):
    bindir = nvml_standin / "usr/bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "nvidia-imex").write_text("#!/bin/sh\n")
    (bindir / "nvidia-imex").chmod(0o755)
    driver = DriverRoot(nvml_standin)
    assert driver.command("nvidia-imex", []) == [str(bindir / "nvidia-imex")]
    assert driver.command("nvidia-imex", ["/opt/emu/nvidia-imex"]) == ["/opt/emu/nvidia-imex"]
    assert driver.command("nvidia-imex-ctl", []) == ["nvidia-imex-ctl"]  # not there: PATH
    env = driver.environment(tmp_path / "links")
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path / "links")
    assert sorted(os.listdir(tmp_path / "links")) == [
        "libnvidia-ml.so.1",
        "libnvidia-ml.so.580.82.07",
    ]  # and not the driver root's libc
    host = DriverRoot(Path("/")).environment(tmp_path / "host-links")
    assert host.get("LD_LIBRARY_PATH") == os.environ.get("LD_LIBRARY_PATH")  # left alone
    assert not (tmp_path / "host-links").exists()


# --- the host's own IMEX service ---------------------------------------------------------------
def test_an_enabled_host_unit_is_found_and_a_masked_one_is_not(tray: Path):
    paths = Paths(tray)
    assert host_service_condition(paths) is None
    wants = tray / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "nvidia-imex.service").symlink_to("/lib/systemd/system/nvidia-imex.service")
    assert enabled_links(paths) == [wants / "nvidia-imex.service"]
    condition = host_service_condition(paths)
    assert condition and condition["type"] == ConditionType.HOST_IMEX_SERVICE
    assert condition["blocking"] and "systemctl disable --now" in condition["message"]
    (tray / "etc/systemd/system/nvidia-imex.service").symlink_to("/dev/null")  # masked
    assert host_service_condition(paths) is None


def test_a_running_nvidia_imex_that_is_not_ours_is_found(tray: Path, tmp_path: Path):
    paths = Paths(tray)
    sleeper = tmp_path / "sleeper/nvidia-imex"  # a process named nvidia-imex: sleep
    sleeper.parent.mkdir()
    sleeper.symlink_to("/bin/sleep")
    python = tmp_path / "python/nvidia-imex"  # ... and one whose argv names our config
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    theirs = subprocess.Popen([str(sleeper), "60"])
    code = "import time; time.sleep(60)"
    ours = subprocess.Popen([str(python), "-c", code, "-c", str(paths.imex_config)])
    try:
        for proc in (theirs, ours):
            (tray / "proc" / str(proc.pid)).symlink_to(f"/proc/{proc.pid}")
        found = foreign_daemons(paths)
        assert [pid for pid, _ in found] == [theirs.pid]
        assert f"pid {theirs.pid}" in host_service_condition(paths)["message"]
    finally:
        for proc in (theirs, ours):
            proc.kill()
            proc.wait()
    assert foreign_daemons(paths) == []  # gone: its /proc entry no longer resolves


# --- NVIDIA's IMEX defaults --------------------------------------------------------------------
def test_the_imex_config_has_nvidias_grace_time_and_log_level_unless_told(tray: Path):
    paths = Paths(tray)
    config = render_config(paths=paths, bind_ip="10.0.0.1", server_port=50000, cmd_port=50005)
    values = config_values(config)
    assert values["IMEX_NODE_DISCONNECTED_GRACE_TIME"] == "-1"  # wait forever for a peer
    assert values["LOG_LEVEL"] == "4"  # INFO
    told = config_values(
        render_config(
            paths=paths,
            bind_ip="10.0.0.1",
            server_port=50000,
            cmd_port=50005,
            grace_time=300,
            log_level=2,
        )
    )
    assert (told["IMEX_NODE_DISCONNECTED_GRACE_TIME"], told["LOG_LEVEL"]) == ("300", "2")
    assert str(paths.imex_config).endswith("var/lib/domain-portal/imex/config.cfg")


def test_only_new_peers_or_addresses_need_a_new_daemon(tray: Path):
    paths = Paths(tray)

    def write(ip: str = "10.0.0.1", nodes: str = "10.0.0.1\n", level: int = 4) -> bool:
        config = render_config(
            paths=paths, bind_ip=ip, server_port=50000, cmd_port=50005, log_level=level
        )
        return write_config(paths=paths, config=config, nodes=nodes)

    assert write()  # the first config: a daemon has to start anyway
    assert not write()
    assert not write(level=2)  # a newer agent's log level waits for the next start
    assert config_values(paths.imex_config.read_text())["LOG_LEVEL"] == "2"
    assert write(nodes="10.0.0.1\n10.0.0.2\n")
    assert write(ip="10.0.0.9")


def test_the_agent_never_touches_the_hosts_etc_nvidia_imex(tray: Path):
    paths = Paths(tray)
    for path in (paths.imex_config, paths.nodes_file, paths.pidfile, paths.credentials):
        assert "etc/nvidia-imex" not in str(path)
        assert str(path).startswith(str(tray / "var/lib/domain-portal"))


# --- channel devices ---------------------------------------------------------------------------
def test_channels_default_to_what_nvidia_gives_containers(tray: Path):
    channels = Channels(Paths(tray).channels_dir)
    old = os.umask(0o077)  # the agent's umask does not decide who may open a channel
    try:
        channels.ensure([7], 237)
    finally:
        os.umask(old)
    st = (Paths(tray).channels_dir / "channel7").lstat()
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666


def test_a_configured_mode_and_group_are_kept_and_repaired(tray: Path):
    channels = Channels(Paths(tray).channels_dir, mode=0o660, gid=4242)
    channels.ensure([7], 237)
    device = Paths(tray).channels_dir / "channel7"
    assert (stat.S_IMODE(device.lstat().st_mode), device.lstat().st_gid) == (0o660, 4242)
    os.chmod(device, 0o600)  # drift
    channels.ensure([7], 237)
    assert stat.S_IMODE(device.lstat().st_mode) == 0o660


def test_the_cdi_spec_says_the_same_as_the_host(tray: Path):
    spec = json.loads(
        cdi_spec(
            numbers=[7],
            major=237,
            root=tray,
            domain_uid="u",
            mode="Single",
            file_mode=0o660,
            gid=4242,
        )
    )
    (node,) = spec["devices"][0]["containerEdits"]["deviceNodes"]
    # CDI spec: fileMode (int64), permissions (cgroup r/w/m), gid (uint32)
    assert (node["fileMode"], node["permissions"], node["gid"]) == (0o660, "rw", 4242)
    default = json.loads(cdi_spec(numbers=[7], major=237, root=tray, domain_uid="u", mode="Single"))
    (node,) = default["devices"][0]["containerEdits"]["deviceNodes"]
    assert node["fileMode"] == 0o666 and "gid" not in node
