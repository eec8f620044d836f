"""The agent's pieces on a tray root: fabric facts, channels, CDI spec, IMEX files, daemon."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.channels import (
    Channels,
    cdi_device_node,
    cdi_spec,
    cdi_version,
    channel_numbers,
    remove_cdi,
)
from nodeagent.config import Paths
from nodeagent.driver import DriverRoot
from nodeagent.files import write_atomic
from nodeagent.imex.ctl import parse_domain_json
from nodeagent.imex.files import render_config, render_nodes
from nodeagent.imex.supervisor import Daemon, log_tail, rotate_log
from nodeagent.probe import ZERO_UUID, channel_major, clique_of, probe
from nodeagent.traylog import TrayLog
from testbed.emulator.tray import GpuFacts, TrayFacts, channel_major_for, prepare_tray
from testbed.processes import wait_until

CLUSTER = "5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11"


@pytest.fixture
def tray(tmp_path):
    facts = TrayFacts(
        hostname="gb-r07-t03",
        ip="127.12.7.3",
        cluster_uuid=CLUSTER,
        clique_id=1,
        gpus=[GpuFacts(index=i, uuid=f"GPU-{i}") for i in range(4)],
    )
    return prepare_tray(tmp_path, facts)


def test_the_channel_major_comes_from_proc_devices_character_part(tray):
    major = channel_major(tray / "proc/devices")
    assert major == channel_major_for("gb-r07-t03")
    text = (tray / "proc/devices").read_text()
    assert f"{major} nvidia-caps-imex-channels" in text.replace("  ", " ")
    # a block device of the same name does not count
    (tray / "proc/devices").write_text(
        "Character devices:\n  1 mem\n\nBlock devices:\n250 nvidia-caps-imex-channels\n"
    )
    assert channel_major(tray / "proc/devices") is None


def test_majors_differ_between_trays():
    assert len({channel_major_for(f"gb-r01-t{i:02d}") for i in range(1, 19)}) > 1


def test_the_probe_reports_the_clique_only_when_every_gpu_agrees(tray):
    facts = probe(
        proc_devices=tray / "proc/devices",
        hostname="gb-r07-t03",
        ip="127.12.7.3",
        driver=DriverRoot(tray),
        facts_file=tray / "run/nvidia-emu/fabric.json",
    )
    assert facts.clique == f"{CLUSTER}.1" and len(facts.gpus) == 4
    assert clique_of([("COMPLETED", 1, CLUSTER), ("COMPLETED", 2, CLUSTER)]) == ("", None)
    assert clique_of([("COMPLETED", 1, CLUSTER), ("IN_PROGRESS", 1, CLUSTER)]) == ("", None)


def test_not_supported_or_an_all_zero_uuid_means_no_multi_node_nvlink():
    assert clique_of([("NOT_SUPPORTED", 0, "")]) == ("", None)  # PCIe H100
    assert clique_of([("COMPLETED", 0, ZERO_UUID)] * 8) == ("", None)  # HGX H100


def test_channels_are_char_devices_with_the_trays_major_and_minor_n(tray):
    channels = Channels(Paths(tray).channels_dir)
    channels.check_mknod()
    assert channels.ensure([7], 237) == [7]
    st = (Paths(tray).channels_dir / "channel7").lstat()
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (237, 7)
    assert stat.S_IMODE(Paths(tray).channels_dir.stat().st_mode) == 0o755
    inode = st.st_ino
    channels.ensure([7], 237)  # idempotent: the node is left alone
    assert (Paths(tray).channels_dir / "channel7").lstat().st_ino == inode
    channels.ensure([9], 240)  # another domain: the old node goes
    assert channels.present() == {9: (240, 9)}
    channels.remove_all()
    assert channels.present() == {}


def test_the_emulator_only_fallback_writes_plain_files(tray):
    channels = Channels(Paths(tray).channels_dir, emulated_files=True)
    channels.ensure([3], 237)
    assert channels.present() == {3: (237, 3)}


def test_all_mode_travels_as_a_range():
    assert channel_numbers({"mode": "All", "first": 0, "last": 2047}) == list(range(2048))
    assert channel_numbers({"mode": "Single", "numbers": [5]}) == [5]
    assert channel_numbers(None) == []


def test_the_cdi_spec_describes_the_channel_device_nodes(tray):
    spec = json.loads(cdi_spec(numbers=[7], major=237, root=tray, domain_uid="u", mode="Single"))
    assert spec["cdiVersion"] and spec["kind"] == "imex-channel.portal.domains/channel"
    (device,) = spec["devices"]
    assert device["name"] == "channel7"
    (node,) = device["containerEdits"]["deviceNodes"]
    assert node["type"] == "c" and (node["major"], node["minor"]) == (237, 7)
    assert node["path"] == "/dev/nvidia-caps-imex-channels/channel7"
    assert node["hostPath"] == str(tray / "dev/nvidia-caps-imex-channels/channel7")
    every = json.loads(
        cdi_spec(numbers=list(range(2048)), major=237, root=tray, domain_uid="u", mode="All")
    )
    assert [d["name"] for d in every["devices"]] == ["all"]
    assert len(every["devices"][0]["containerEdits"]["deviceNodes"]) == 2048


def test_the_imex_config_keeps_the_daemon_in_the_foreground(tray):
    paths = Paths(tray)
    text = render_config(paths=paths, bind_ip="127.12.7.3", server_port=50000, cmd_port=50005)
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert values["DAEMONIZE"] == "0" and values["IMEX_CMD_ENABLED"] == "1"
    assert values["IMEX_NODE_CONFIG_FILE"] == str(paths.nodes_file)
    assert values["BIND_INTERFACE_IP"] == values["IMEX_CMD_BIND_INTERFACE_IP"] == "127.12.7.3"
    assert render_nodes(["10.0.0.2", "10.0.0.1"]) == "10.0.0.2\n10.0.0.1\n"


def test_files_are_written_atomically_and_only_when_they_change(tmp_path):
    path = tmp_path / "etc/x.cfg"
    assert write_atomic(path, "A=1\n") is True
    assert write_atomic(path, "A=1\n") is False
    assert [p.name for p in path.parent.iterdir()] == ["x.cfg"]  # no temp files left


def test_the_domain_json_yields_state_and_this_nodes_peers():
    doc = {
        "status": "DEGRADED",
        "nodes": {
            "0": {"connections": {"1": {"host": "a", "status": "CONNECTED"}}},
            "1": {
                "status": "READY",
                "connections": {
                    "0": {"host": "b", "status": "CONNECTED"},
                    "2": {"host": "c", "status": "DISCONNECTED"},
                },
            },
        },
    }
    health = parse_domain_json(json.dumps(doc), 1)
    assert health.state == "DEGRADED"
    assert health.own_state == "READY"  # this node's row: the word `-q` would print
    assert parse_domain_json(json.dumps(doc), 0).own_state == ""
    assert health.peers == [
        {"index": 0, "ip": "b", "status": "CONNECTED"},
        {"index": 2, "ip": "c", "status": "DISCONNECTED"},
    ]


def test_a_new_agent_re_adopts_the_running_daemon_instead_of_restarting_it(tray):
    paths = Paths(tray)
    write_atomic(paths.imex_config, "DAEMONIZE=0\n")
    # a stand-in long-running "daemon"; start() appends `-c <config>` to its command line
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    log = TrayLog("t")
    first = Daemon(sleeper, paths, log)
    first.start()
    try:
        second = Daemon(sleeper, paths, log)
        assert second.adopt() and second.pid == first.pid and second.running()
        second.stop(timeout=2)
        assert not second.running()
        first.child.wait(5)
        assert not paths.pidfile.exists()
    finally:
        if first.child.poll() is None:
            first.child.kill()


def ignores(pid: int, sig: int) -> bool:
    """Whether the process has set `sig` to be ignored (/proc's SigIgn mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(
        next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn")), 16
    )
    return bool(mask & (1 << (sig - 1)))


def test_a_daemon_that_ignores_sigterm_is_killed(tray):
    paths = Paths(tray)
    write_atomic(paths.imex_config, "DAEMONIZE=0\n")
    stubborn = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
    ]
    daemon = Daemon(stubborn, paths, TrayLog("t"))
    daemon.start()
    child = daemon.child
    assert child is not None
    wait_until(lambda: ignores(child.pid, signal.SIGTERM), 10, what="SIGTERM ignored")
    daemon.stop(timeout=0.5)
    assert daemon.pid is None
    assert child.returncode == -signal.SIGKILL  # SIGTERM was not enough: it was killed


def test_the_agent_module_never_imports_django():
    code = "import sys, nodeagent.cli, testbed.emulator.fleet; print('django' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class FakeNvmlLibrary:
    """Stands in for libnvidia-ml behind pynvml's Python API (no GPU here): pynvml's own
    struct and errors, and a fabric-info call that fills the caller's struct as the C
    library does through the pointer it is given."""

    def __init__(self, *, state: int, status: int = 0, cluster: str = CLUSTER, supported=True):
        import pynvml

        self.pynvml = pynvml
        self.c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t
        self.NVMLError = pynvml.NVMLError
        self.NVMLError_NotSupported = pynvml.NVMLError_NotSupported
        self.NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
        self.NVML_SUCCESS = pynvml.NVML_SUCCESS
        self.state, self.status, self.cluster, self.supported = state, status, cluster, supported

    def nvmlErrorString(self, status):
        return f"NVML error {status}"

    def nvmlDeviceGetGpuFabricInfo(self, handle, info_ref):
        if not self.supported:
            raise self.pynvml.NVMLError(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        import uuid as uuid_module

        info = info_ref._obj  # what ctypes.byref points at
        info.clusterUuid[:] = list(uuid_module.UUID(self.cluster).bytes)
        info.status, info.cliqueId, info.state = self.status, 7, self.state
        return self.NVML_SUCCESS


@pytest.mark.parametrize(
    ("library", "expected"),
    [
        (dict(state=3), ("COMPLETED", 7, CLUSTER, "")),
        (dict(state=2), ("IN_PROGRESS", 7, CLUSTER, "")),
        (dict(state=3, status=999), ("FAILED", 7, CLUSTER, "NVML error 999")),  # failed
        (dict(state=3, cluster=ZERO_UUID), ("COMPLETED", 7, ZERO_UUID, "")),  # HGX H100
        (dict(state=0, supported=False), ("NOT_SUPPORTED", 0, "", "")),  # PCIe H100
    ],
)
def test_the_nvml_probe_reads_fabric_info_through_a_filled_struct(library, expected):
    from nodeagent.probe import _fabric_info

    state, clique, cluster, error = _fabric_info(FakeNvmlLibrary(**library), handle=object())
    assert (state, clique, cluster, error) == expected
    # and the tray-level verdict: only a completed, non-zero, agreed clique counts
    verdict = clique_of([(state, clique, cluster)] * 4)
    assert verdict == (
        (CLUSTER, 7) if expected[0] == "COMPLETED" and cluster == CLUSTER else ("", None)
    )


def test_without_ip_the_agent_takes_the_source_address_of_its_route_to_the_portal():
    from nodeagent.cli import route_source_ip

    assert route_source_ip("http://127.0.0.1:8000") == "127.0.0.1"


def test_the_agent_reads_its_service_account_token_afresh_at_every_join(tmp_path):
    from nodeagent.agent import Agent
    from nodeagent.cli import config_from, parser

    token = tmp_path / "token"
    argv = ["--portal", "http://127.0.0.1:9", "--root", str(tmp_path), "--ip", "127.0.0.1"]
    agent = Agent(config_from(parser().parse_args([*argv, "--join-token", "dpj_x"])))
    assert agent.link.join_credential() == {"join_token": "dpj_x"}
    agent = Agent(config_from(parser().parse_args([*argv, "--service-account-token-file",
                                                   str(token)])))  # fmt: skip
    token.write_text("first.jwt.sig\n")
    assert agent.link.join_credential() == {"service_account_token": "first.jwt.sig"}
    token.write_text("rotated.jwt.sig")  # the kubelet replaced it
    assert agent.link.join_credential() == {"service_account_token": "rotated.jwt.sig"}
    token.write_text("")
    with pytest.raises(OSError, match="empty"):  # the cycle backs off and tries again
        agent.link.join_credential()


def test_a_logs_tail_is_its_last_lines_without_a_part_line_or_blanks(tmp_path):
    log = tmp_path / "nvidia-imex.log"
    assert log_tail(log) == []  # no log yet
    log.write_text("started\n\nbind 127.0.1.2:50000: Address already in use\n")
    assert log_tail(log) == ["started", "bind 127.0.1.2:50000: Address already in use"]
    log.write_text("x" * 5000 + "\n" + "".join(f"line {i}\n" for i in range(8)))
    assert log_tail(log) == [f"line {i}" for i in range(3, 8)]
    log.write_text("y" * 9000 + "\nlast\n")  # the 4 KiB read starts mid-line
    assert log_tail(log) == ["last"]


def test_the_spec_an_agent_wrote_under_nvidias_kind_is_removed_with_ours(tray):
    paths = Paths(tray)
    legacy = tray / "etc/cdi/nvidia.com-imex-channel.json"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text('{"cdiVersion": "0.5.0", "kind": "nvidia.com/imex-channel", "devices": []}')
    ours = cdi_spec(numbers=[7], major=237, root=tray, domain_uid="u", mode="Single")
    write_atomic(paths.cdi_spec, ours)
    assert paths.cdi_spec.name == "imex-channel.portal.domains-channel.json"
    remove_cdi(paths.cdi_spec)
    assert list((tray / "etc/cdi").iterdir()) == []


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        ({"kind": "a.b/c", "devices": [{"name": "channel0", "containerEdits": {}}]}, "0.3.0"),
        # A claim uid as the device's name: 10 uids in 16 start with a digit.
        ({"kind": "a.b/c", "devices": [{"name": "3f2a", "containerEdits": {}}]}, "0.5.0"),
        ({"kind": "a.b/c", "devices": [{"name": "c3f2a", "containerEdits": {}}]}, "0.3.0"),
        (
            {
                "kind": "a.b/c",
                "devices": [
                    {
                        "name": "x",
                        "containerEdits": {"deviceNodes": [{"path": "/d", "hostPath": "/d"}]},
                    }
                ],
            },
            "0.5.0",
        ),
        (
            {
                "kind": "a.b/c",
                "devices": [{"name": "x", "containerEdits": {"mounts": [{"type": "bind"}]}}],
            },
            "0.4.0",
        ),
        ({"kind": "a.b/c", "annotations": {"k": "v"}, "devices": [{"name": "1"}]}, "0.6.0"),
        ({"kind": "a.b/c.d", "devices": [{"name": "x"}]}, "0.6.0"),
    ],
)
def test_the_cdi_version_is_the_oldest_cdis_own_rules_accept(spec, version):
    assert cdi_version(spec) == version


def test_both_channel_paths_write_their_cdi_spec_through_one_writer(tmp_path):
    text = cdi_spec(numbers=[3], major=235, root=tmp_path, domain_uid="7d", mode="Single")
    spec = json.loads(text)
    assert spec["cdiVersion"] == "0.6.0"  # the annotation naming the domain
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        cdi_device_node(3, major=235, host_path=tmp_path / "dev/nvidia-caps-imex-channels/channel3")
    ]


def test_a_released_domains_daemon_log_is_put_aside_for_the_next_one(tmp_path):
    """A reused tray's next domain never quotes the previous domain's daemon lines."""
    log = tmp_path / "nvidia-imex.log"
    rotate_log(log)  # nothing to put aside: nothing happens
    log.write_text("node map of team-b/old differs\n")
    rotate_log(log)
    assert log_tail(log) == []
    assert (tmp_path / "nvidia-imex.log.1").read_text() == "node map of team-b/old differs\n"
