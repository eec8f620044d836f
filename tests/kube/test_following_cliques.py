"""A domain that follows its workload over two racks, one NVLink clique each, end to end.

Upstream's control plane, the real server and Celery worker, the node agents on emulated
trays and one `kubelet-dra` per tray, as in tests/kube/test_dra_e2e.py; each Node labelled
with its tray's clique and rack. The domain is requested with no placement constraint, so
its claim template selects a free tray of either clique: four pods on four trays land in
both, kube-scheduler alone deciding where. Each clique's first tray creates that clique's
ensemble (index 0, a channel of its own clique's); the last pod of a clique going takes
that ensemble with it and leaves the other clique's daemons running as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from domains.computedomains.models import ChannelAllocation, DomainMember, Phase
from domains.inventory.models import Node
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.slices import slice_name
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from testbed.emulator.tray import daemon_starts
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import ClusterKube, kube_binaries
from testbed.kube.kubelet_dra import KubeletFleet
from testbed.kube.objects import RACK_LABEL, gpu_labels
from tests.e2e.conftest import phase_of, release_domain, request_domain
from tests.kube.test_dra_e2e import NAMESPACE, delete_pod, no_claims_left, prepared, run_pod

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(45)  # this module's loopback range


@pytest.fixture
def kube(real_kube: ClusterKube) -> ClusterKube:
    """Upstream's API server, with the chart's DeviceClass and the tenant's namespace."""
    real_kube.put_namespace(NAMESPACE)
    install_device_class(real_kube)
    return real_kube


@contextlib.contextmanager
def labelled_trays(
    portal: str, kube: ClusterKube, nodes: list[Node], kubelet_dirs: Path
) -> Iterator[tuple[AgentFleet, KubeletFleet]]:
    """The trays' Nodes labelled with their clique and rack as GPU Feature Discovery and
    the operator label them, their agents and kubelets; entered once every slice is out."""
    kubeconfig = kube.cluster.kubeconfig
    for node in nodes:
        assert node.clique is not None and node.rack is not None
        labels = {"nvidia.com/gpu.clique": node.clique.label, RACK_LABEL: node.rack.name}
        kube.put_node(node.hostname, {**gpu_labels(), **labels})
    fleet = AgentFleet(portal, nodes, kubelet_dir=kubelet_dirs, kubeconfig=kubeconfig)
    with KubeletFleet(kube_binaries(), fleet, kubeconfig=kubeconfig) as kubelets, fleet:
        fleet.wait_joined()
        kubelets.wait_registered(DRIVER_NAME)
        for node in nodes:
            host = node.hostname
            wait_for(lambda h=host: kube.get("resourceslices", slice_name(h)), 30, f"{host} slice")
        yield fleet, kubelets


def cd_nodes(kube: ClusterKube, name: str) -> list[dict[str, Any]]:
    status = (kube.get("computedomains", name, NAMESPACE) or {}).get("status") or {}
    return list(status.get("nodes") or [])


def test_a_following_domains_pods_in_two_cliques_both_get_prepared_claims(
    portal, tenant_api, kube, kubelet_dirs
):
    racks = factories.make_racks("2", "2", ip_prefix=IP_PREFIX, first_rack=5)
    nodes = list(
        Node.objects.filter(rack__in=racks).select_related("clique", "rack").order_by("hostname")
    )
    clique_of = {n.hostname: n.clique for n in nodes}
    with labelled_trays(portal, kube, nodes, kubelet_dirs) as (fleet, kubelets):
        domain = request_domain(tenant_api, "span", 0)
        wait_for(lambda: kube.get("resourceclaimtemplates", "span-channel", NAMESPACE), 20, "RCT")
        uids = {f"p-{i}": run_pod(kube, f"p-{i}", "span-channel") for i in range(4)}
        on = {}
        for name, uid in uids.items():
            host, devices = prepared(kube, kubelets, name, uid, timeout=90)
            assert len(devices) == 1, devices  # its IMEX channel
            on[host] = (name, uid)
        assert sorted(on) == sorted(clique_of)  # one pod per tray: both cliques
        assert set(domain.cliques.all()) == {n.clique for n in nodes}

        # One ensemble per clique, each indexed from 0, each with its own clique's channel.
        members = DomainMember.objects.filter(domain=domain, active=True)
        per_clique = {
            c.pk: sorted(members.filter(clique=c).values_list("index", flat=True))
            for c in domain.cliques.all()
        }
        assert list(per_clique.values()) == [[0, 1], [0, 1]]
        live = ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True)
        assert sorted(live.values_list("clique_id", flat=True)) == sorted(per_clique)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "both ensembles ready")

        # The published ComputeDomain lists every tray with its clique and per-clique index.
        def listed() -> list[tuple[str, str, int]] | None:
            rows = cd_nodes(kube, "span")
            ready = len(rows) == 4 and all(r["status"] == "Ready" for r in rows)
            return sorted((r["name"], r["cliqueID"], r["index"]) for r in rows) if ready else None

        rows = wait_for(listed, 30, "four Ready nodes in the ComputeDomain's status")
        index = {m.node.hostname: m.index for m in members.select_related("node")}
        assert rows == sorted((h, clique_of[h].label, index[h]) for h in clique_of)

        # The second clique's pods go: its ensemble goes with them, the first stays as it is.
        second = sorted(clique_of)[2:]
        kept = sorted(clique_of)[:2]
        assert {clique_of[h].pk for h in second} != {clique_of[h].pk for h in kept}
        starts = {h: daemon_starts(fleet.tray_root(h)) for h in kept}
        for host in second:
            delete_pod(kube, kubelets[host], *on[host])
        gone = clique_of[second[0]].pk
        wait_for(
            lambda: not live.filter(clique_id=gone).exists(), 30, "the second clique's channel"
        )
        assert list(live.values_list("clique_id", flat=True)) == [clique_of[kept[0]].pk]
        wait_for(lambda: len(cd_nodes(kube, "span")) == 2, 30, "two nodes listed")
        assert phase_of(domain) == Phase.READY
        assert {h: daemon_starts(fleet.tray_root(h)) for h in kept} == starts

        for host in kept:
            delete_pod(kube, kubelets[host], *on[host])
        no_claims_left(kube)
        release_domain(tenant_api, "span")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
