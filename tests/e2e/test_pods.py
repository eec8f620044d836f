"""Agent and IMEX runner run as Kubernetes runs their pods, and a domain still forms.

Each pod is its own PID and mount namespace with its own /etc/hosts, bind-mounted as the
kubelet mounts it (tests.support.processes.pod_argv): the agents' pod, and one IMEX runner
pod per tray, parent of that tray's nvidia-imex. The emulated daemon resolves its peers'
names through /etc/hosts of its own namespace, as glibc does. So a domain that follows its
workload forms only if each runner writes its own pod's hosts file, and a running daemon
meets a new peer only if its own runner tells it to re-resolve: an agent writing a hosts
file of its own, or signalling a pid from its namespace, reaches no daemon.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from domains.computedomains.models import Phase
from domains.inventory.models import Node
from nodeagent.config import Paths
from nodeagent.emulator.tray import daemon_starts
from nodeagent.files import read_json
from nodeagent.imex.files import HOSTS_BEGIN
from nodeagent.runner import status_path
from tests import factories
from tests.e2e.conftest import phase_of, release_domain, request_domain
from tests.support import kubemock
from tests.support.agents import AgentFleet, wait_for
from tests.support.dra import allocate, deallocate, published_slice
from tests.support.kubelet import Kubelet
from tests.support.processes import pods_supported, running, start_server, start_worker
from tests.support.trays import Tray, facts_of

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not pods_supported(), reason="pods need root and util-linux's unshare"),
]

IP_PREFIX = factories.tray_ip_prefix(31)  # this module's loopback range


@pytest.fixture(scope="module")
def kube() -> Iterator[kubemock.KubeMock]:
    with kubemock.running() as mock:
        yield mock


@pytest.fixture(scope="module")
def kubeconfig(kube) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kc-") as tmp:
        yield kube.write_kubeconfig(Path(tmp) / "kubeconfig")


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, kubeconfig) -> Iterator[str]:
    env = {"KUBECONFIG": str(kubeconfig), "PORTAL_KUBE_ENABLED": "1"}
    server, url = start_server(PORTAL_HEARTBEAT_INTERVAL_S="2", **env)
    worker = start_worker(concurrency=4, **env)
    with running(worker, server):
        yield url


@pytest.fixture
def kubelets(kube) -> Iterator[Path]:
    kube.put_namespace("e2e")
    with tempfile.TemporaryDirectory(prefix="kl-") as tmp:
        yield Path(tmp)


def names_in(hosts: str) -> list[str]:
    return sorted(line.split()[1] for line in hosts.splitlines() if "\tportal-imex-" in line)


def resolved(fleet: AgentFleet, host: str) -> int:
    return int((read_json(status_path(Paths(fleet.tray_root(host)))) or {}).get("resolved", 0))


def test_a_peer_change_on_a_running_domain_reaches_the_daemons_only_through_their_runners(
    portal, tenant_api, kube, kubeconfig, kubelets
):
    (rack,) = factories.make_racks("3", ip_prefix=IP_PREFIX)
    hosts = [n.hostname for n in Node.objects.filter(rack=rack).order_by("slot")]
    first, joiner = hosts[:2], hosts[2]
    nodes = Node.objects.filter(rack=rack)
    with AgentFleet(portal, nodes, kubelet_dir=kubelets, kubeconfig=kubeconfig, pods=True) as fleet:
        fleet.wait_joined()
        for host in hosts:
            wait_for(lambda h=host: published_slice(kube, h), 30, "slices")
        domain = request_domain(tenant_api, "pods", 0)
        wait_for(lambda: kube.get("resourceclaimtemplates", "pods-channel", "e2e"), 20, "template")
        kubelet = {host: Kubelet(kubelets / host) for host in hosts}
        for k in kubelet.values():
            k.register()
        claims = {
            host: allocate(kube, namespace="e2e", template="pods-channel", pod=f"p-{i}", node=host)
            for i, host in enumerate(hosts)
        }

        # Two pods: two trays, each daemon started by its runner with both names.
        with ThreadPoolExecutor(2) as pool:
            prepared = pool.map(lambda h: kubelet[h].prepare_until_ready(claims[h], 60), first)
            assert [r["error"] for r in prepared] == ["", ""]
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "a domain of two")
        pids = {host: fleet.daemon_pid(host) for host in first}
        for host in first:
            assert names_in(fleet.runner_hosts(host)) == ["portal-imex-0", "portal-imex-1"]
            assert fleet.runner_hosts(host).startswith("# Kubernetes-managed hosts file")
            assert not (fleet.tray_root(host) / "etc/hosts").exists()  # nobody's /etc/hosts
        assert HOSTS_BEGIN not in fleet.pod_hosts(fleet.name).read_text()  # the agents' pod

        # A third pod: a new peer for two running daemons, which only their runners reach.
        assert kubelet[joiner].prepare_until_ready(claims[joiner], 60)["error"] == ""
        wait_for(lambda: domain.members.filter(active=True).count() == 3, 30, "three members")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "one domain of three")
        for host in first:
            assert names_in(fleet.runner_hosts(host)) == [f"portal-imex-{i}" for i in range(3)]
            assert daemon_starts(fleet.tray_root(host)) == 1  # re-resolved, never restarted
            assert fleet.daemon_pid(host) == pids[host]
            assert resolved(fleet, host) >= 1
            assert "told to re-resolve" in fleet.runners[host].log()
        assert resolved(fleet, joiner) == 0  # it read every name at its start

        # The third pod goes: its tray leaves, the two stay as they are.
        assert kubelet[joiner].unprepare(claims[joiner]) == {claims[joiner].uid: ""}
        deallocate(kube, claims[joiner])
        wait_for(lambda: domain.members.filter(active=True).count() == 2, 30, "two members")
        wait_for(lambda: fleet.leftovers(joiner) == [], 30, "the leaver clean")
        wait_for(lambda: HOSTS_BEGIN not in fleet.runner_hosts(joiner), 10, "its names gone")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the two still one domain")
        assert {h: fleet.daemon_pid(h) for h in first} == pids

        for host in first:
            assert kubelet[host].unprepare(claims[host]) == {claims[host].uid: ""}
            deallocate(kube, claims[host])
        release_domain(tenant_api, "pods")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        for host in hosts:
            wait_for(lambda h=host: fleet.leftovers(h) == [], 30, "trays clean")
            wait_for(lambda h=host: HOSTS_BEGIN not in fleet.runner_hosts(h), 10, "names gone")
        for k in kubelet.values():
            k.close()


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
