"""The IMEX runner: a real runner process keeps the daemon the agent asks for, and only that.

The daemon here is a stand-in process (the runner appends `-c <config>` to its command);
the agent's side is `RunnerDaemon`, as the agent uses it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from nodeagent.config import Paths
from nodeagent.files import read_json, write_atomic
from nodeagent.imex.files import HOSTS_BEGIN, HOSTS_END, UNUSED_SLOT_IP, peer_hosts, slot_name
from nodeagent.imex.runnerfiles import REQUEST_SCHEMA, STATUS_SCHEMA, request_path
from nodeagent.runner import RunnerDaemon, status_path
from nodeagent.traylog import TrayLog
from testbed.processes import wait_until

DAEMON = f"{sys.executable} -c 'import time; time.sleep(600)'"
TOKEN = "0b7e6a9c0d"  # a domain's token in its peer names


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "tray")


def start_runner(paths: Paths, daemon: str = DAEMON) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "nodeagent.runner", "--root", str(paths.root)]
    argv += ["--hosts-file", str(pod_hosts_file(paths))]  # never the machine's own
    return subprocess.Popen([*argv, "--imex-bin", daemon, "--stop-timeout", "2"])


def pod_hosts_file(paths: Paths) -> Path:
    """The runner pod's /etc/hosts, as the kubelet wrote it."""
    path = paths.root / "pod/hosts"
    if not path.exists():
        path.parent.mkdir(parents=True)
        path.write_text("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    return path


@pytest.fixture
def runner(paths: Paths) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_runner(paths)
    yield proc
    proc.terminate()
    proc.wait(10)


def status(paths: Paths) -> dict:
    return read_json(status_path(paths)) or {}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_it_runs_the_daemon_the_agent_asks_for_and_a_new_agent_adopts_it(paths, runner):
    agent = RunnerDaemon(paths, TrayLog("t"))
    assert not agent.adopt() and not agent.running()
    agent.start()
    pid = wait_until(lambda: status(paths).get("pid"), 10, what="the daemon to start")
    assert agent.running() and agent.pid == pid
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[-3:-1] == [b"-c", str(paths.imex_config).encode()]

    successor = RunnerDaemon(paths, TrayLog("t"))  # the agent restarted
    assert successor.adopt() and successor.pid == pid and successor.running()
    assert status(paths)["starts"] == 1 and alive(pid)

    successor.stop(timeout=2)
    assert not alive(pid) and not status(paths)["running"] and not successor.running()


def test_both_files_are_of_their_typed_shape(paths, runner):
    agent = RunnerDaemon(paths, TrayLog("t"))
    agent.set_hosts(peer_hosts({0: "127.12.9.1"}, TOKEN))
    agent.start()
    wait_until(lambda: status(paths).get("pid"), 10, what="the daemon to start")
    jsonschema.validate(read_json(request_path(paths)), REQUEST_SCHEMA)
    jsonschema.validate(status(paths), STATUS_SCHEMA)


def test_a_request_written_before_the_protocol_field_is_read_as_version_1(paths, runner):
    """An agent of an older release wrote no `protocol`: the runner (kept by OnDelete across
    upgrades, and so met by agents of both sides) takes it as it is."""
    doc = {"run": True, "instance": 3, "config": str(paths.imex_config)}
    write_atomic(request_path(paths), json.dumps(doc))
    wait_until(lambda: status(paths).get("instance") == 3, 10, what="the old request run")
    agent = RunnerDaemon(paths, TrayLog("t"))
    assert agent.adopt() and agent.running()


def test_a_daemon_that_exits_stays_exited_until_the_agent_decides(paths, runner):
    agent = RunnerDaemon(paths, TrayLog("t"))
    agent.start()
    pid = wait_until(lambda: status(paths).get("pid"), 10, what="the daemon to start")
    assert agent.running()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not status(paths)["running"], 10, what="the runner to see the exit")
    time.sleep(0.3)
    assert status(paths)["starts"] == 1  # the runner did not restart it by itself
    assert not agent.running() and agent.exit_code == -signal.SIGKILL
    agent.start()  # the agent's decision: a new instance
    wait_until(lambda: status(paths).get("pid") not in (None, pid), 10, what="a new daemon")
    assert status(paths)["starts"] == 2 and agent.running() and agent.exit_code is None


def test_the_runners_own_end_stops_the_daemon_gracefully(paths):
    proc = start_runner(paths)
    agent = RunnerDaemon(paths, TrayLog("t"))
    agent.start()
    pid = wait_until(lambda: status(paths).get("pid"), 10, what="the daemon to start")
    proc.send_signal(signal.SIGTERM)  # its pod deleted: uninstall, or an operator's update
    assert proc.wait(10) == 0
    assert not alive(pid) and status(paths)["running"] is False


def test_a_missing_runner_is_named_instead_of_waited_for_forever(paths):
    agent = RunnerDaemon(paths, TrayLog("t"), start_timeout=0.2)
    agent.start()
    assert agent.running() and agent.problem() == ""  # the request is simply not taken up yet
    time.sleep(0.3)
    assert "the IMEX runner has not answered" in agent.problem()


# A daemon that notes what it resolved at its start and every SIGUSR1 it gets.
NOTING_DAEMON = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
hosts = pathlib.Path(sys.argv[2])
out.write_text("start " + " ".join(l.split()[-1] for l in hosts.read_text().splitlines()
                                 if l.startswith("127.12.")) + "\\n")
last = []
def noted(*_):  # as nvidia-imex: one SIGUSR1 within 5 s of the last it acted on is ignored
    now = time.monotonic()
    acted = not last or now - last[-1] >= 5
    last.append(now) if acted else None
    with out.open("a") as fh:
        fh.write("usr1\\n" if acted else "ignored\\n")
signal.signal(signal.SIGUSR1, noted)
while True:
    time.sleep(1)
"""


def noting_daemon(paths: Paths, tmp_path: Path) -> tuple[str, Path]:
    script, out = tmp_path / "daemon.py", tmp_path / "daemon.out"
    script.write_text(NOTING_DAEMON)
    return f"{sys.executable} {script} {out} {pod_hosts_file(paths)}", out


def test_the_runner_writes_the_peers_into_its_own_hosts_file_in_place_and_says_so(paths):
    hosts = pod_hosts_file(paths)
    inode = hosts.stat().st_ino
    proc = start_runner(paths)
    try:
        agent = RunnerDaemon(paths, TrayLog("t"))
        agent.set_hosts(peer_hosts({0: "127.12.9.1", 2: "127.12.9.3"}, TOKEN))
        wait_until(agent.peers_applied, 10, what="the runner to write the peers")
        text = hosts.read_text()
        assert text.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
        assert f"127.12.9.1\t{slot_name(0, TOKEN)}\n" in text
        assert f"127.12.9.3\t{slot_name(2, TOKEN)}\n" in text
        assert f"{UNUSED_SLOT_IP}\t{slot_name(1, TOKEN)}\n" in text  # nobody's: nowhere
        assert status(paths)["peers_generation"] == 1

        agent.set_hosts(peer_hosts({0: "127.12.9.1"}, TOKEN))  # a member left
        wait_until(agent.peers_applied, 10, what="the new peers")
        assert "127.12.9.3" not in hosts.read_text()
        assert f"{UNUSED_SLOT_IP}\t{slot_name(2, TOKEN)}\n" in hosts.read_text()
        agent.set_hosts({})  # released: the block goes, the kubelet's lines stay
        wait_until(agent.peers_applied, 10, what="the block removed")
        assert hosts.read_text() == "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
        assert hosts.stat().st_ino == inode  # written in place, as a bind mount needs
        assert not paths.hosts.exists()  # the agent's own hosts file is never written
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_runner_of_protocol_1_is_named_for_a_domain_whose_names_carry_a_token(paths):
    """A runner kept by OnDelete from before tokens writes `portal-imex-<slot>` lines from
    the members by slot: right for a domain from before tokens, wrong for any other."""
    agent = RunnerDaemon(paths, TrayLog("t"))
    agent.start()
    old = {"protocol": 1, "instance": 1, "pid": 4242, "running": True, "peers_generation": 0,
           "version": "0.1.0", "updated_at": time.time()}  # fmt: skip
    write_atomic(status_path(paths), json.dumps(old))
    agent.set_hosts(peer_hosts({0: "127.12.9.1"}))  # names without a token
    assert agent.problem() == ""
    assert read_json(request_path(paths))["peers"] == {"0": "127.12.9.1"}
    agent.set_hosts(peer_hosts({0: "127.12.9.1"}, TOKEN))
    assert "cannot write the peer names" in agent.problem()
    assert read_json(request_path(paths))["peers"] == {}


def test_a_request_of_protocol_1_is_written_as_its_members_names(paths):
    """An agent from before protocol 2 (the runner may be replaced before it)."""
    proc = start_runner(paths)
    try:
        doc = {"run": False, "instance": 0, "peers": {"1": "127.12.9.2"}, "peers_generation": 1}
        write_atomic(request_path(paths), json.dumps(doc))
        wait_until(lambda: status(paths).get("peers_generation") == 1, 10, what="peers")
        block = pod_hosts_file(paths).read_text().split(HOSTS_BEGIN)[1]
        assert block == f"\n127.12.9.2\t{slot_name(1)}\n{HOSTS_END}\n"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_new_daemon_starts_with_the_peers_already_in_the_runners_hosts_file(paths, tmp_path):
    daemon, out = noting_daemon(paths, tmp_path)
    proc = start_runner(paths, daemon)
    try:
        agent = RunnerDaemon(paths, TrayLog("t"))
        agent.set_hosts(peer_hosts({0: "127.12.9.1", 1: "127.12.9.2"}, TOKEN))
        agent.start()  # in the same breath: the runner writes the peers first
        wait_until(lambda: out.exists() and out.read_text(), 10, what="the daemon to start")
        assert out.read_text() == f"start {slot_name(0, TOKEN)} {slot_name(1, TOKEN)}\n"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_resolve_is_a_sigusr1_from_the_runner_to_its_own_child_at_most_every_5_s(paths, tmp_path):
    daemon, out = noting_daemon(paths, tmp_path)
    proc = start_runner(paths, daemon)
    try:
        agent = RunnerDaemon(paths, TrayLog("t"))
        agent.start()
        wait_until(lambda: out.exists() and out.read_text(), 10, what="the daemon to start")
        agent.set_hosts(peer_hosts({0: "127.12.9.1"}, TOKEN))
        agent.resolve()
        wait_until(lambda: status(paths)["resolved"] == 1, 10, what="the runner's SIGUSR1")
        wait_until(lambda: out.read_text().count("usr1") == 1, 5, what="the daemon to get it")
        agent.resolve()  # too soon: the daemon would ignore it, so the runner holds it
        time.sleep(1.0)
        assert status(paths)["resolved"] == 1 and out.read_text().count("usr1") == 1
        wait_until(lambda: status(paths)["resolved"] == 2, 10, what="the held SIGUSR1")
        wait_until(lambda: out.read_text().count("usr1") == 2, 5, what="the second one")
        assert "ignored" not in out.read_text()  # the daemon acted on every one it got
    finally:
        proc.terminate()
        proc.wait(10)
