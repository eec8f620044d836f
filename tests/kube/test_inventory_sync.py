"""Nodes and Namespaces come in from Kubernetes through list + watch.

The tests marked `cluster` watch upstream's kube-apiserver; the others need faults, request
counts or a compaction at a chosen moment, which only the mock API server gives."""

from __future__ import annotations

import pytest

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import Phase
from domains.inventory.models import Node, NodeSource, NodeState
from domains.inventory.services import node_accept, node_cordon
from domains.kube.models import SyncState
from domains.tenancy.models import Namespace, NamespaceSource
from testbed import factories
from testbed.kube.cluster import wait_for
from testbed.kube.objects import CLUSTER, gpu_labels
from tests.support.lifecycle import request_and_place

pytestmark = pytest.mark.django_db

LISTS = r"^/api/v1/nodes(\?(?!.*watch=true)|$)"


@pytest.mark.cluster
def test_nodes_with_a_clique_label_become_trays(real_kube, real_sync):
    real_kube.put_node("gb-a1", labels=gpu_labels(clique=1), ip="10.1.0.1")
    real_kube.put_node("gb-a2", labels=gpu_labels(clique=1), ip="10.1.0.2")
    real_kube.put_node("cpu-1", labels={"kubernetes.io/os": "linux"}, ip="10.9.0.1")
    real_sync.step("nodes")

    trays = {n.hostname: n for n in Node.objects.select_related("clique", "rack")}
    assert set(trays) == {"gb-a1", "gb-a2"}  # no clique label: not a tray
    tray = trays["gb-a1"]
    assert tray.management_ip == "10.1.0.1"
    assert (tray.gpu_count, tray.gpu_product) == (4, "NVIDIA-GB200")
    assert tray.clique.label == f"{CLUSTER}.1"
    assert tray.rack.name == "r1"
    assert sorted(t.slot for t in trays.values()) == [1, 2]  # drawn in the rack view
    assert tray.source == NodeSource.KUBERNETES
    assert tray.state == NodeState.UNKNOWN  # ready once its agent joins
    assert Event.objects.filter(verb="node.discovered").count() == 2


@pytest.mark.cluster
def test_a_slot_label_places_the_tray_in_its_rack(real_kube, real_sync, settings):
    settings.PORTAL = {**settings.PORTAL, "KUBE_SLOT_LABEL": "example.com/slot"}
    real_kube.put_node("gb-a7", labels=gpu_labels(**{"example.com/slot": "7"}), ip="10.1.0.7")
    real_kube.put_node("gb-ax", labels=gpu_labels(), ip="10.1.0.8")
    real_sync.step("nodes")
    assert Node.objects.get(hostname="gb-a7").slot == 7
    assert Node.objects.get(hostname="gb-ax").slot == 1


@pytest.mark.cluster
def test_changes_arrive_by_watch_without_listing_again(real_kube, real_sync, operator):
    real_kube.put_node("gb-a1", labels=gpu_labels(clique=1), ip="10.1.0.1")
    real_sync.step("nodes")
    listed_at = SyncState.objects.get(resource="nodes").listed_at

    real_kube.put_node("gb-a2", labels=gpu_labels(clique=1), ip="10.1.0.2")  # appears
    real_kube.put_node("gb-a1", labels=gpu_labels(clique=2, rack="r2"), ip="10.1.0.1")  # relabelled
    real_sync.step("nodes")
    # A Node may write its own labels: a known tray's new clique and rack wait for an
    # operator, the tray out of placement meanwhile.
    a1 = Node.objects.select_related("clique", "rack").get(hostname="gb-a1")
    assert a1.clique.label == f"{CLUSTER}.1" and a1.state == NodeState.PENDING
    assert set(a1.identity_hold["changes"]) == {"clique", "rack"}
    assert Node.objects.filter(hostname="gb-a2").exists()
    node_accept(actor=Actor.for_user(operator), node=a1)
    a1 = Node.objects.select_related("clique", "rack").get(hostname="gb-a1")
    assert a1.clique.label == f"{CLUSTER}.2" and a1.rack.name == "r2"

    real_kube.put_node(
        "gb-a1", labels=gpu_labels(clique=2, rack="r2"), ip="10.1.0.1", unschedulable=True
    )
    real_sync.step("nodes")
    a1.refresh_from_db()
    assert a1.state == NodeState.CORDONED
    assert "unschedulable" in a1.state_reason

    real_kube.put_node("gb-a1", labels=gpu_labels(clique=2, rack="r2"), ip="10.1.0.1")
    real_sync.step("nodes")
    a1.refresh_from_db()
    assert a1.state == NodeState.READY

    real_kube.delete("nodes", "gb-a2")  # never used by a domain: removed
    real_sync.step("nodes")
    assert not Node.objects.filter(hostname="gb-a2").exists()
    assert SyncState.objects.get(resource="nodes").listed_at == listed_at  # all by watch


@pytest.mark.cluster
def test_an_operators_own_cordon_is_not_undone_by_kubernetes(real_kube, real_sync, operator):
    real_kube.put_node("gb-a1", labels=gpu_labels(), ip="10.1.0.1")
    real_sync.step("nodes")
    tray = Node.objects.get(hostname="gb-a1")
    node_cordon(actor=Actor.for_user(operator), node=tray, reason="bad cable")
    real_kube.put_node("gb-a1", labels=gpu_labels(), ip="10.1.0.2")
    real_sync.step("nodes")
    tray.refresh_from_db()
    assert (tray.state, tray.management_ip) == (NodeState.PENDING, "10.1.0.1")  # held
    node_accept(actor=Actor.for_user(operator), node=tray)
    tray.refresh_from_db()
    assert (tray.state, tray.state_reason) == (NodeState.CORDONED, "bad cable")
    assert tray.management_ip == "10.1.0.2"


@pytest.mark.cluster
def test_a_vanished_tray_that_serves_a_domain_is_kept_gone_and_down(
    real_kube, real_sync, ns_a, tenant_a
):
    (rack,) = factories.make_racks("4", ip_prefix="127.15")
    trays = list(rack.nodes.select_related("clique").order_by("slot"))
    labels = gpu_labels(rack=rack.name) | {"nvidia.com/gpu.clique": trays[0].clique.label}
    for tray in trays:  # the same trays, now known to Kubernetes
        real_kube.put_node(tray.hostname, labels=labels, ip=tray.management_ip)
    real_sync.step("nodes")
    domain = request_and_place(ns_a, tenant_a, num_nodes=4)
    assert domain.phase == Phase.FORMING

    real_kube.delete("nodes", trays[0].hostname)
    real_sync.step("nodes")
    tray = Node.objects.get(pk=trays[0].pk)  # still there: the domain refers to it
    assert tray.gone and tray.state == NodeState.DOWN
    assert domain.members.filter(node=tray).exists()

    real_kube.put_node(trays[0].hostname, labels=labels, ip=trays[0].management_ip)
    real_sync.step("nodes")
    tray.refresh_from_db()
    assert not tray.gone and tray.state == NodeState.READY


@pytest.mark.cluster
def test_namespaces_become_tenants_and_leave_when_deleted(real_kube, real_sync):
    real_kube.put_namespace("research")
    real_kube.put_namespace("kube-system")
    real_sync.step("namespaces")
    research = Namespace.objects.get(name="research")
    assert research.source == NamespaceSource.KUBERNETES and research.active
    assert not Namespace.objects.filter(name="kube-system").exists()

    real_kube.delete("namespaces", "research")
    real_sync.step("namespaces")
    research.refresh_from_db()
    assert not research.active  # kept for its history, closed for new requests

    # The namespace controller empties and removes it; then it can be made again.
    wait_for(lambda: real_kube.get("namespaces", "research") is None, what="research to go")
    real_kube.put_namespace("research")
    real_sync.step("namespaces")
    research.refresh_from_db()
    assert research.active


@pytest.mark.cluster
def test_only_labelled_namespaces_are_tenants_when_a_label_is_configured(
    real_kube, real_sync, settings
):
    settings.PORTAL = {**settings.PORTAL, "KUBE_NAMESPACE_LABEL": "portal.domains/tenant=true"}
    real_kube.put_namespace("research", labels={"portal.domains/tenant": "true"})
    real_kube.put_namespace("scratch")
    real_sync.step("namespaces")
    assert list(Namespace.objects.values_list("name", flat=True)) == ["research"]

    real_kube.put_namespace("research", labels={})  # label removed
    real_sync.step("namespaces")
    assert not Namespace.objects.get(name="research").active


def test_an_api_server_error_mid_sync_is_recovered(kube, sync):
    kube.put_node("gb-a1", labels=gpu_labels(), ip="10.1.0.1")
    kube.fail_next("GET", LISTS, status=500)
    assert sync.step("nodes") == [False]  # the list failed: back off, nothing half-done
    state = SyncState.objects.get(resource="nodes")
    assert state.errors == 1 and "500" in state.last_error
    assert sync["nodes"].backoff() > 0
    assert sync.step("nodes") == [True]
    assert Node.objects.filter(hostname="gb-a1").exists()

    kube.fail_next("GET", r"watch=true", status=503)  # the watch fails next
    kube.put_node("gb-a2", labels=gpu_labels(), ip="10.1.0.2")
    assert sync.step("nodes") == [False]
    assert sync.step("nodes") == [True]  # resumes from the last version: nothing lost
    assert Node.objects.filter(hostname="gb-a2").exists()


def test_a_compacted_watch_relists_and_catches_deletions_it_missed(kube, sync):
    kube.put_node("gb-a1", labels=gpu_labels(), ip="10.1.0.1")
    kube.put_node("gb-a2", labels=gpu_labels(), ip="10.1.0.2")
    sync.step("nodes")
    kube.delete("nodes", "gb-a2")
    kube.compact()  # the DELETED event is gone from history: the watch gets 410
    sync.step("nodes")
    assert sync["nodes"].version is None
    sync.step("nodes")  # relist: gb-a2 missing → vanished
    assert list(Node.objects.values_list("hostname", flat=True)) == ["gb-a1"]
    assert kube.count("GET", LISTS) == 2


@pytest.mark.cluster
def test_malformed_labels_are_ignored_not_fatal(real_kube, real_sync):
    real_kube.put_node("gb-bad", labels=gpu_labels() | {"nvidia.com/gpu.clique": "x" * 40 + ".1"})
    real_kube.put_node(
        "gb-big", labels=gpu_labels() | {"nvidia.com/gpu.count": "99999"}, ip="10.1.0.2"
    )
    real_kube.put_node("gb-ok", labels=gpu_labels(), ip="10.1.0.3")
    assert real_sync.step("nodes") == [True]
    assert not Node.objects.filter(hostname="gb-bad").exists()  # no usable clique: not a tray
    assert Node.objects.get(hostname="gb-big").gpu_count == 4  # kept the default
    assert Node.objects.filter(hostname="gb-ok").exists()
