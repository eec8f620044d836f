"""The IMEX runner: a real runner process keeps the daemon the agent asks for, and only that.

The daemon here is a stand-in process (the runner appends `-c <config>` to its command);
the agent's side is `RunnerDaemon`, as the agent uses it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent import TrayLog
from nodeagent.config import Paths
from nodeagent.files import read_json
from nodeagent.runner import RunnerDaemon, status_path
from tests.support.processes import wait_until

DAEMON = f"{sys.executable} -c 'import time; time.sleep(600)'"


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "tray")


def start_runner(paths: Paths) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "nodeagent.runner", "--root", str(paths.root)]
    return subprocess.Popen([*argv, "--imex-bin", DAEMON, "--stop-timeout", "2"])


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
