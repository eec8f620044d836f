"""An agent that starts while the portal is away never advertises its tray as free.

NVIDIA's kubelet plugin never deletes its ResourceSlice when it exits; the kubelet's own
delayed wipe removes the slices of a plugin that is really gone. So the previous agent's
slice stays, and a new agent publishes its own as the last desired state it was told said
(kept on disk), not eligible for a new member until it has heard from the portal: a
Pending pod of a domain that follows its workload is never allocated a tray that serves
another domain. The agent here is the real one, with its DRA plugin against the API mock;
the portal is a port nobody listens on.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent import Agent
from nodeagent.client import PortalError
from nodeagent.config import AgentConfig, Paths
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.slices import scheduling
from nodeagent.files import write_atomic
from testbed.emulator.tray import GpuFacts, TrayFacts, prepare_tray
from testbed.kube import kubemock

PORTAL = "http://127.0.0.1:9"  # nobody answers
DOMAIN = "0b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11"
NODE = {"id": 7, "hostname": "gb-r07-t01"}
SERVING = {
    "node": NODE,
    "domain": {
        "uid": DOMAIN,
        "name": "team-a/train",
        "generation": 3,
        "request_id": "req-1",
        "index": 0,
        "peers": [{"index": 0, "ip": "127.12.7.1", "hostname": "gb-r07-t01"}],
        "imex": {"server_port": 50000, "cmd_port": 50005},
        "channels": {"mode": "Single", "numbers": [3]},
    },
    "release": None,
    "eligible": False,
}


@pytest.fixture
def root() -> Iterator[Path]:
    """Short: the plugin's unix sockets live under it (107 bytes at most)."""
    with tempfile.TemporaryDirectory(prefix="rs-") as path:
        yield Path(path)


@pytest.fixture
def cluster() -> Iterator[kubemock.KubeMock]:
    with kubemock.running() as mock:
        yield mock


def start_agent(root: Path, cluster: kubemock.KubeMock) -> Agent:
    facts = TrayFacts(
        hostname="gb-r07-t01",
        ip="127.12.7.1",
        cluster_uuid="5b7e6a9c-0d8b-4f55-9d3e-3f1f3c4f0a11",
        clique_id=1,
        gpus=[GpuFacts(index=i, uuid=f"GPU-{i}") for i in range(4)],
    )
    if not (root / "proc/devices").exists():
        prepare_tray(root, facts)
    paths = Paths(root)
    # Joined before: the node token is on disk, so no call is needed to have one.
    credentials = {"portal": PORTAL, "node_id": NODE["id"], "token": "dpn_x"}
    write_atomic(paths.credentials, json.dumps(credentials))
    config = AgentConfig(
        portal=PORTAL,
        join_token="dpj_x",
        root=root,
        hostname="gb-r07-t01",
        imex_bin=["/bin/true"],
        fabric_facts=root / "run/nvidia-emu/fabric.json",
        emulated_channel_files=True,
        websocket=False,
        kubelet_dir=root / "kubelet",
        kubeconfig=cluster.write_kubeconfig(root / "kubeconfig"),
    )
    return Agent(config)


def slice_says(cluster: kubemock.KubeMock) -> tuple[str, bool]:
    found = cluster.get("resourceslices", f"gb-r07-t01-{DRIVER_NAME}")
    assert found is not None, "no slice published"
    (device,) = found["spec"]["devices"]
    attributes = device["attributes"]
    return attributes["domain"]["string"], attributes["eligible"]["bool"]


def one_cycle_with_the_portal_away(agent: Agent) -> None:
    with pytest.raises(PortalError):
        agent.cycle()  # no desired state fetched yet: the cycle fails after the slice


def test_a_restart_with_the_portal_away_advertises_the_last_known_domain_not_eligible(
    root, cluster
):
    write_atomic(Paths(root).desired, json.dumps(SERVING))  # what the last agent was told
    agent = start_agent(root, cluster)
    try:
        one_cycle_with_the_portal_away(agent)
        assert slice_says(cluster) == (DOMAIN, False)
    finally:
        agent.shutdown()
    assert slice_says(cluster) == (DOMAIN, False)  # kept on exit, as NVIDIA's plugin does


def test_a_new_agent_that_never_heard_from_the_portal_is_not_eligible(root, cluster):
    agent = start_agent(root, cluster)
    try:
        one_cycle_with_the_portal_away(agent)
        assert slice_says(cluster) == ("", False)
    finally:
        agent.shutdown()


def test_a_kept_file_that_is_no_desired_state_counts_as_none(root, cluster):
    write_atomic(Paths(root).desired, json.dumps({"node": NODE, "domain": "garbage"}))
    agent = start_agent(root, cluster)
    try:
        assert agent.link.last_known is None
        one_cycle_with_the_portal_away(agent)
        assert slice_says(cluster) == ("", False)
    finally:
        agent.shutdown()


def test_the_portals_word_decides_once_fetched():
    free = {"node": NODE, "domain": None, "release": None, "eligible": True}
    assert scheduling(free) == ("", True)  # type: ignore[arg-type]
    assert scheduling(free, fetched=False) == ("", False)  # type: ignore[arg-type]
    assert scheduling(SERVING, fetched=False) == (DOMAIN, False)  # type: ignore[arg-type]
    assert scheduling(None) == ("", False)
