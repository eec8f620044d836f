"""Agent and IMEX runner run as Kubernetes runs their pods: the daemon outlives the agent.

Each pod is its own PID and mount namespace with its own /etc/hosts, bind-mounted as the
kubelet mounts it (testbed.processes.pod_argv): the agents' pod, and one IMEX runner
pod per tray, parent of that tray's nvidia-imex. How a domain forms and meets new peers
across those pods, with pods scheduled and claims prepared by upstream's control plane and
kubelet code, is tests/kube/test_dra_e2e.py; this needs no Kubernetes at all.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest

from domains.computedomains.models import Phase
from domains.inventory.models import Node
from testbed import factories
from testbed.agents import wait_for
from testbed.emulator.tray import daemon_starts
from testbed.processes import pods_supported
from testbed.trays import Tray, facts_of
from tests.e2e.conftest import phase_of, release_domain, request_domain

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not pods_supported(), reason="pods need root and util-linux's unshare"),
]


def test_the_daemon_outlives_the_agents_pod_and_the_next_agent_adopts_it(portal, tenant_api):
    """kill -9 of the agent's pod takes every process of its PID namespace with it; the
    daemon lives in the runner's pod, serves on, and the next agent pod re-adopts it."""
    (rack,) = factories.make_racks("2", ip_prefix=factories.tray_ip_prefix(32))
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    with tempfile.TemporaryDirectory(prefix="pods-") as tmp, contextlib.ExitStack() as stack:
        trays = [
            stack.enter_context(Tray(portal, facts_of(n), root=Path(tmp) / n.hostname, pods=True))
            for n in nodes
        ]
        for tray in trays:
            tray.wait_ready()
        domain = request_domain(tenant_api, "outlives", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        victim, peer = trays
        pid = victim.daemon_pid()
        assert pid and victim.runner_status()["pid"] != pid  # numbered by the runner's pod
        assert (victim.root / "dev/nvidia-caps/nvidia-cap4323").is_char_device()

        victim.kill_agent()  # the agent's pod dies, and every process in it
        assert victim.daemon_pid() == pid
        assert victim.domain_status() == peer.domain_status() == "UP"
        victim.start_agent()
        wait_for(lambda: "re-adopted" in victim.log(), 30, "the new agent to re-adopt")
        wait_for(lambda: victim.health().get("ok"), 30, "the agent to report again")
        assert victim.daemon_pid() == pid and daemon_starts(victim.root) == 1
        assert phase_of(domain) == Phase.READY

        release_domain(tenant_api, "outlives")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        wait_for(lambda: victim.daemon_pid() is None, 15, "the runner to stop its daemon")
