"""The nodes file of a domain that follows its workload: a fixed list of stable names.

The agent applies desired-state documents to an emulated tray; the daemon is never started
(these tests look at the files a start, or a restart, would read).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agentwire.messages import DesiredDomain
from nodeagent.agent import Agent
from nodeagent.config import AgentConfig, Paths
from testbed.emulator.tray import GpuFacts, TrayFacts, prepare_tray

CLUSTER = "5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11"


def make_agent(root: Path, driver_version: str = "580.82.07") -> Agent:
    facts = TrayFacts(
        hostname="gb-r07-t01",
        ip="127.12.7.1",
        cluster_uuid=CLUSTER,
        clique_id=1,
        gpus=[GpuFacts(index=i, uuid=f"GPU-{i}") for i in range(4)],
        driver_version=driver_version,
    )
    prepare_tray(root, facts)
    config = AgentConfig(
        portal="http://portal.invalid",
        join_token="dpj_x",
        root=root,
        imex_bin=["/bin/true"],
        fabric_facts=root / "run/nvidia-emu/fabric.json",
    )
    made = Agent(config)
    made.facts.probe()
    return made


@pytest.fixture
def agent(tmp_path):
    made = make_agent(tmp_path)
    yield made
    made.link.close()


def desired(*, slots: int, members: int, index: int = 0, **more: Any) -> DesiredDomain:
    want: dict[str, Any] = {
        "uid": "0b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11",
        "name": "team-a/train",
        "generation": 1,
        "request_id": "req-1",
        "index": index,
        "peers": [
            {"index": i, "ip": f"127.12.7.{i + 1}", "hostname": f"gb-r07-t{i + 1:02d}"}
            for i in range(members)
        ],
        "imex": {"server_port": 50000, "cmd_port": 50005},
        "channels": {"mode": "Single", "numbers": [3]},
        "slots": slots,
        **more,
    }
    return want  # type: ignore[return-value]


def configure(agent: Agent, want: DesiredDomain) -> tuple[list[int], str]:
    """The agent's files for `want`, and what that asks of the daemon, as its loop does it."""
    error = agent.configure(want, time.monotonic())
    return agent.files.present, error


def test_the_nodes_file_lists_eighteen_names_whatever_the_cliques_size(agent):
    present, error = configure(agent, desired(slots=3, members=2))
    assert error == "" and present == [3]
    nodes = Paths(agent.cfg.root).nodes_file.read_text()
    assert nodes == "".join(f"portal-imex-{i}\n" for i in range(18))


def test_a_tray_added_to_the_clique_rewrites_no_members_nodes_file(agent):
    """The portal's slot count follows the clique's trays; a daemon must not follow it."""
    configure(agent, desired(slots=3, members=2))
    paths = Paths(agent.cfg.root)
    before = paths.nodes_file.stat().st_mtime_ns, paths.nodes_file.read_text()
    # A Node joins the clique (or is relabelled into it), and a third member joins: what a
    # running daemon reads only at its start stays as it is; the newcomer is a hosts line.
    configure(agent, desired(slots=4, members=3))
    assert (paths.nodes_file.stat().st_mtime_ns, paths.nodes_file.read_text()) == before
    hosts = paths.hosts.read_text()
    assert "127.12.7.3\tportal-imex-2\n" in hosts


def test_a_member_index_beyond_the_names_is_refused_and_nothing_is_written(agent):
    present, error = configure(agent, desired(slots=20, members=20, index=18))
    assert present == [] and "member 18" in error and "18 names (0 to 17)" in error
    assert not Paths(agent.cfg.root).nodes_file.exists()


@pytest.mark.parametrize(
    ("version", "refused"),
    [("570.148.08", True), ("570.158.01", False), ("580.82.07", False), ("", False)],
)
def test_a_driver_older_than_570_158_01_does_not_serve_a_domain_that_follows_its_workload(
    tmp_path, version, refused
):
    agent = make_agent(tmp_path, driver_version=version)
    present, error = configure(agent, desired(slots=3, members=2))
    assert bool(error) == refused
    if refused:
        assert present == [] and "needs NVIDIA driver 570.158.01 or newer" in error
        assert f"this tray runs {version}" in error
        assert not Paths(tmp_path).nodes_file.exists()  # the daemon is not given names
    # A domain with a fixed set of trays lists IPs: any driver serves it.
    want = desired(slots=3, members=2)
    del want["slots"]
    assert configure(agent, want)[1] == ""
    agent.link.close()


def test_the_names_carry_the_domains_token_and_every_one_resolves(agent):
    """Two domains' daemons never list the same names (IMEX would take them for one domain),
    and no name of the list falls through to DNS."""
    _, error = configure(agent, desired(slots=3, members=2, names="0b7e6a9c0d"))
    assert error == ""
    paths = Paths(agent.cfg.root)
    names = [f"portal-imex-0b7e6a9c0d-{i}" for i in range(18)]
    assert paths.nodes_file.read_text() == "".join(f"{n}\n" for n in names)
    hosts = paths.hosts.read_text()
    assert "127.12.7.1\tportal-imex-0b7e6a9c0d-0\n127.12.7.2\tportal-imex-0b7e6a9c0d-1\n" in hosts
    for name in names[2:]:
        assert f"127.0.0.2\t{name}\n" in hosts
