"""Pods get their IMEX channel the way Kubernetes delivers devices: DRA, end to end.

Real server, Celery worker (publishing ComputeDomains and their ResourceClaimTemplates to
the Kubernetes API mock) and node agents on emulated trays, each agent a DRA kubelet plugin.
The test plays the rest of the cluster: the control plane and the scheduler (claims made
from the template and allocated to a tray's published device, `tests.support.dra`) and the
kubelet (`tests.support.kubelet`, the real gRPC contract over unix sockets).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from domains.computedomains.models import DomainClaim, DomainMember, Phase
from domains.inventory.models import Node
from nodeagent.config import CHANNELS_DIR
from nodeagent.dra import CDI_CLAIM_KIND, DRIVER_NAME
from tests import factories
from tests.e2e.conftest import phase_of, release_domain, request_domain
from tests.kube.schemas import computedomain_errors, dra_errors
from tests.support import kubemock
from tests.support.agents import AgentFleet, wait_for
from tests.support.cdi import resolve
from tests.support.dra import allocate, deallocate, published_slice
from tests.support.kubelet import Kubelet
from tests.support.processes import running, start_server, start_worker

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(21)  # this module's loopback range


@pytest.fixture(scope="module")
def kube() -> Iterator[kubemock.KubeMock]:
    with kubemock.running() as mock:
        mock.validators["computedomains"] = computedomain_errors
        for plural in ("resourceclaimtemplates", "resourceslices"):
            mock.validators[plural] = dra_errors
        yield mock


@pytest.fixture(scope="module")
def kubeconfig(kube) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kc-") as tmp:
        yield kube.write_kubeconfig(Path(tmp) / "kubeconfig")


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, kubeconfig) -> Iterator[str]:
    """The real server and worker, publishing to the mock API server."""
    env = {"KUBECONFIG": str(kubeconfig), "PORTAL_KUBE_ENABLED": "1"}
    server, url = start_server(PORTAL_HEARTBEAT_INTERVAL_S="2", **env)
    worker = start_worker(concurrency=4, **env)
    with running(worker, server):
        yield url


@pytest.fixture
def kubelets() -> Iterator[Path]:
    """Every tray's kubelet directory, under a short path (unix sockets: 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kl-") as tmp:
        yield Path(tmp)


@pytest.fixture(autouse=True)
def cluster_namespaces(kube) -> None:
    for name in ("e2e", "intruder"):
        kube.put_namespace(name)


def kubelet_of(kubelets: Path, host: str) -> Kubelet:
    kubelet = Kubelet(kubelets / host)
    kubelet.register()
    return kubelet


def test_a_placed_domains_pods_get_their_channel_and_nothing_else_gets_in(
    portal, tenant_api, kube, kubeconfig, kubelets
):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    with AgentFleet(portal, nodes, kubelet_dir=kubelets, kubeconfig=kubeconfig) as fleet:
        fleet.wait_joined()
        for node in nodes:
            wait_for(lambda n=node: published_slice(kube, n.hostname), 20, "slices")
        domain = request_domain(tenant_api, "train", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        wait_for(lambda: kube.get("resourceclaimtemplates", "train-channel", "e2e"), 20, "template")
        members = list(DomainMember.objects.filter(domain=domain).select_related("node"))
        (channel,) = domain.channels.values_list("channel", flat=True)

        prepared = {}
        for i, member in enumerate(members):
            host = member.node.hostname
            claim = allocate(
                kube, namespace="e2e", template="train-channel", pod=f"w-{i}", node=host
            )
            kubelet = kubelet_of(kubelets, host)
            result = kubelet.prepare_until_ready(claim)
            assert result["error"] == ""
            (device,) = result["devices"]
            assert device["pool"] == host and device["device"] == "channel"
            assert device["requests"] == ["channel"]
            assert device["cdi_device_ids"] == [f"{CDI_CLAIM_KIND}={claim.uid}"]
            root = fleet.tray_root(host)
            cdi = resolve([root / "var/run/cdi", root / "etc/cdi"], device["cdi_device_ids"][0])
            (node,) = cdi["containerEdits"]["deviceNodes"]
            assert node["path"] == f"/{CHANNELS_DIR}/channel{channel}"
            assert Path(node["hostPath"]).exists()  # the channel device is on the tray
            assert kubelet.prepare(claim)[claim.uid] == result  # idempotent
            prepared[host] = (kubelet, claim)

        # A pod scheduled on a tray that is not the domain's: refused, nothing made there.
        stranger = next(n for n in nodes if n.hostname not in prepared)
        claim = allocate(
            kube, namespace="e2e", template="train-channel", pod="w-x", node=stranger.hostname
        )
        kubelet = kubelet_of(kubelets, stranger.hostname)
        error = kubelet.prepare(claim)[claim.uid]["error"]
        assert f"tray {stranger.hostname} is not one of the trays placed" in error
        assert list((fleet.tray_root(stranger.hostname) / "var/run/cdi").glob("*")) == []
        assert kubelet.unprepare(claim) == {claim.uid: ""}
        deallocate(kube, claim)

        # A claim of another namespace naming this domain (a copied template): refused.
        host, (kubelet, _) = next(iter(prepared.items()))
        claim = allocate(
            kube, namespace="intruder", template="train-channel", template_namespace="e2e",
            pod="spy", node=host,
        )  # fmt: skip
        error = kubelet.prepare(claim)[claim.uid]["error"]
        assert "may not use ComputeDomain e2e/train" in error
        deallocate(kube, claim)

        # The agent killed between prepare and unprepare: its checkpoint remembers.
        fleet.kill_agents()
        fleet.start()
        fleet.wait_joined()
        for host, (kubelet, claim) in prepared.items():
            kubelet = kubelet_of(kubelets, host)  # the kubelet sees the plugin come back
            assert kubelet.unprepare(claim) == {claim.uid: ""}
            assert kubelet.unprepare(claim) == {claim.uid: ""}  # idempotent
            assert not (
                fleet.tray_root(host) / f"var/run/cdi/{DRIVER_NAME}-{claim.uid}.json"
            ).exists()
            deallocate(kube, claim)
        assert not DomainClaim.objects.filter(domain=domain, released_at__isnull=True).exists()
        assert DomainClaim.objects.filter(domain=domain).count() == 2

        release_domain(tenant_api, "train")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        wait_for(
            lambda: kube.get("resourceclaimtemplates", "train-channel", "e2e") is None,
            20,
            "template gone",
        )
        assert kube.get("computedomains", "train", "e2e") is None
