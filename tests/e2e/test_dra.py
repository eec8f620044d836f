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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from domains.audit.models import Event
from domains.computedomains.models import DomainClaim, DomainMember, Phase
from domains.inventory.models import Node
from nodeagent.config import CHANNELS_DIR
from nodeagent.dra import CDI_CLAIM_KIND, DRIVER_NAME
from nodeagent.emulator.tray import daemon_starts
from tests import factories
from tests.e2e.conftest import phase_of, release_domain, request_domain
from tests.kube.schemas import computedomain_errors, dra_errors
from tests.support import kubemock
from tests.support.agents import AgentFleet, wait_for
from tests.support.cdi import resolve
from tests.support.dra import allocate, deallocate, published_slice
from tests.support.kubelet import Kubelet
from tests.support.processes import pods_supported, running, start_server, start_worker

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
            # Single mode: the container sees channel0, as with NVIDIA's driver.
            assert (node["path"], node["minor"]) == (f"/{CHANNELS_DIR}/channel0", 0)
            assert (root / CHANNELS_DIR / f"channel{channel}").exists()  # the tray's own
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
        assert "namespace intruder has no live ComputeDomain" in error
        assert "e2e/train" not in error  # nothing of the domain's own namespace
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


def test_a_domain_follows_its_18_pod_workload_grows_shrinks_and_goes(
    portal, tenant_api, kube, kubeconfig, kubelets
):
    """The seeds' way: a numNodes 0 ComputeDomain and an 18-replica Deployment naming its
    template. Nothing is reserved; 18 claims prepared on 18 trays of one clique make one
    IMEX domain of 18; scaling to 9 lets 9 trays leave without restarting the daemons of
    the 9 that stay; deleting the workload and the ComputeDomain leaves nothing behind."""
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX, first_rack=2)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    hosts = [n.hostname for n in nodes]
    pods = pods_supported()  # agents and runners each in a pod of their own, as the chart runs
    with AgentFleet(portal, nodes, kubelet_dir=kubelets, kubeconfig=kubeconfig, pods=pods) as fleet:
        fleet.wait_joined()
        for host in hosts:
            wait_for(lambda h=host: published_slice(kube, h), 30, "slices")
        domain = request_domain(tenant_api, "wl", 0)
        assert phase_of(domain) == Phase.ADMITTED and domain.reason == "WaitingForWorkload"
        wait_for(lambda: kube.get("resourceclaimtemplates", "wl-channel", "e2e"), 20, "template")
        assert not domain.members.exists()

        # 18 pods scheduled at once, one per tray; each kubelet prepares its pod's claim.
        claims = {
            host: allocate(kube, namespace="e2e", template="wl-channel", pod=f"wl-{i}", node=host)
            for i, host in enumerate(hosts)
        }
        kubelets_by_host = {host: kubelet_of(kubelets, host) for host in hosts}
        with ThreadPoolExecutor(len(hosts)) as pool:
            results = dict(
                zip(
                    hosts,
                    pool.map(
                        lambda h: kubelets_by_host[h].prepare_until_ready(claims[h], timeout=60),
                        hosts,
                    ),
                    strict=True,
                )
            )
        assert {h: r["error"] for h, r in results.items()} == {h: "" for h in hosts}
        (channel,) = domain.channels.filter(released_at__isnull=True).values_list(
            "channel", flat=True
        )
        for host, result in results.items():
            root = fleet.tray_root(host)
            (device,) = result["devices"]
            cdi = resolve([root / "var/run/cdi", root / "etc/cdi"], device["cdi_device_ids"][0])
            (node,) = cdi["containerEdits"]["deviceNodes"]
            assert (node["path"], node["minor"]) == (f"/{CHANNELS_DIR}/channel0", 0)
            assert (root / CHANNELS_DIR / f"channel{channel}").exists()  # the tray's own
        wait_for(lambda: phase_of(domain) == Phase.READY, 90, "one IMEX domain of 18")
        members = {
            m.node.hostname: m for m in domain.members.filter(active=True).select_related("node")
        }
        assert sorted(m.index for m in members.values()) == list(range(18))
        pids = {host: fleet.daemon_pid(host) for host in hosts}
        assert [daemon_starts(fleet.tray_root(h)) for h in hosts] == [1] * 18
        nodes_file = fleet.nodes_file(hosts[0])
        assert nodes_file == "".join(f"portal-imex-{i}\n" for i in range(18))

        # Scale to 9: the pods on 9 trays go; those trays leave, the 9 others stay.
        leaving, staying = hosts[9:], hosts[:9]
        for host in leaving:
            assert kubelets_by_host[host].unprepare(claims[host]) == {claims[host].uid: ""}
            deallocate(kube, claims[host])
        wait_for(lambda: domain.members.filter(active=True).count() == 9, 30, "9 trays left")
        wait_for(lambda: all(fleet.leftovers(h) == [] for h in leaving), 30, "leavers clean")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the 9 still one domain")
        for host in staying:
            assert daemon_starts(fleet.tray_root(host)) == 1  # never restarted
            assert fleet.daemon_pid(host) == pids[host]
            assert fleet.nodes_file(host) == nodes_file  # stable names; only hosts changed
        events = [e.verb for e in Event.objects.filter(domain=domain)]
        assert events.count("member.joined") == 18 and events.count("member.left") == 9

        # The workload and the ComputeDomain are deleted: everything goes.
        for host in staying:
            assert kubelets_by_host[host].unprepare(claims[host]) == {claims[host].uid: ""}
            deallocate(kube, claims[host])
        wait_for(lambda: phase_of(domain) == Phase.ADMITTED, 30, "waiting for workload again")
        release_domain(tenant_api, "wl")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "domain Released")
        wait_for(
            lambda: kube.get("resourceclaimtemplates", "wl-channel", "e2e") is None,
            20,
            "template gone",
        )
        assert kube.get("computedomains", "wl", "e2e") is None
        assert kube.count("GET", "resourceclaims") > 0
        for host in hosts:
            assert fleet.leftovers(host) == []
            assert list((fleet.tray_root(host) / "var/run/cdi").glob("*.json")) == []
        for kubelet in kubelets_by_host.values():
            kubelet.close()


def test_a_joiner_whose_daemon_never_gets_ready_is_dropped_and_the_rest_form(
    portal, tenant_api, kube, kubeconfig, kubelets
):
    """One of three trays is unkind (its nvidia-imex hangs while it initialises). At the
    formation deadline (the controller's pass, run here as the beat would) that tray alone
    leaves; its pod's prepare says what to do; the two others form without restarting."""
    from datetime import timedelta

    from django.utils import timezone

    from domains.computedomains.reconcile import reconcile

    (rack,) = factories.make_racks("3", ip_prefix=IP_PREFIX, first_rack=3)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    hosts = [n.hostname for n in nodes]
    stuck, good = hosts[2], hosts[:2]
    with AgentFleet(portal, nodes, kubelet_dir=kubelets, kubeconfig=kubeconfig) as fleet:
        fleet.wait_joined()
        fleet.set_faults(stuck, start_delay_s=3600)
        for host in hosts:
            wait_for(lambda h=host: published_slice(kube, h), 30, "slices")
        domain = request_domain(tenant_api, "stuck", 0)
        wait_for(lambda: kube.get("resourceclaimtemplates", "stuck-channel", "e2e"), 20, "RCT")
        claims = {
            host: allocate(kube, namespace="e2e", template="stuck-channel", pod=f"s-{i}", node=host)
            for i, host in enumerate(hosts)
        }
        by_host = {host: kubelet_of(kubelets, host) for host in hosts}
        first = by_host[stuck].prepare(claims[stuck])[claims[stuck].uid]["error"]
        assert "is not ready for ComputeDomain e2e/stuck yet" in first
        for host in good:
            assert by_host[host].prepare_until_ready(claims[host], timeout=60)["error"] == ""
        wait_for(
            lambda: domain.members.filter(active=True, daemon_state="READY").count() == 2,
            30,
            "the two good daemons READY (waiting for the third)",
        )
        assert phase_of(domain) == Phase.FORMING

        assert reconcile(now=timezone.now() + timedelta(hours=1))["deadline"] == 1
        error = by_host[stuck].prepare(claims[stuck])[claims[stuck].uid]["error"]
        assert f"tray {stuck} was dropped from ComputeDomain e2e/stuck" in error
        assert "Delete this pod" in error
        wait_for(lambda: fleet.leftovers(stuck) == [], 30, "the dropped tray clean")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the two form without it")
        assert [daemon_starts(fleet.tray_root(h)) for h in good] == [1, 1]

        assert by_host[stuck].unprepare(claims[stuck]) == {claims[stuck].uid: ""}
        for host in good:
            assert by_host[host].unprepare(claims[host]) == {claims[host].uid: ""}
        for host in hosts:
            deallocate(kube, claims[host])
        release_domain(tenant_api, "stuck")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "domain Released")
        for kubelet in by_host.values():
            kubelet.close()
