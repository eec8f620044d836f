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
from nodeagent.imex import HOSTS_BEGIN
from nodeagent.runner import status_path
from tests import factories
from tests.e2e.conftest import phase_of, release_domain, request_domain
from tests.support import kubemock
from tests.support.agents import AgentFleet, wait_for
from tests.support.dra import allocate, deallocate, published_slice
from tests.support.kubelet import Kubelet
from tests.support.processes import pods_supported, running, start_server, start_worker

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
        assert HOSTS_BEGIN not in fleet.runner_hosts(joiner)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the two still one domain")
        assert {h: fleet.daemon_pid(h) for h in first} == pids

        for host in first:
            assert kubelet[host].unprepare(claims[host]) == {claims[host].uid: ""}
            deallocate(kube, claims[host])
        release_domain(tenant_api, "pods")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        for host in hosts:
            wait_for(lambda h=host: fleet.leftovers(h) == [], 30, "trays clean")
            assert HOSTS_BEGIN not in fleet.runner_hosts(host)
        for k in kubelet.values():
            k.close()
