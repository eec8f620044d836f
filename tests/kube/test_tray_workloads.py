"""What runs on each tray: the pod watch keeps the pods bound to trays with their
ResourceClaims, on upstream's kube-apiserver; operators see them all on the tray page, a
tenant only their own namespaces'."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from kubernetes import client

from domains.inventory.models import Node
from domains.kube.models import TrayPod
from domains.kube.workloads import tray_pods
from testbed.kube.cluster import ClusterKube
from testbed.kube.objects import gpu_labels

pytestmark = [pytest.mark.django_db, pytest.mark.cluster]


def pod(kube: ClusterKube, name: str, namespace: str, node: str, claim: str = "") -> dict:
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": "main", "image": "train:1"}],
    }
    if claim:
        spec["resourceClaims"] = [{"name": "channel", "resourceClaimName": claim}]
        spec["containers"][0]["resources"] = {"claims": [{"name": "channel"}]}
    return kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def test_the_pods_on_a_tray_and_their_claims_come_in_by_watch(
    real_kube, real_sync, client, operator, tenant_a
):
    real_kube.put_node("gb-w1", labels=gpu_labels(), ip="10.2.0.1")
    real_kube.put_node("cpu-1", labels={"kubernetes.io/os": "linux"}, ip="10.9.0.1")
    real_sync.step("nodes")
    tray = Node.objects.get(hostname="gb-w1")
    pod(real_kube, "train-0", "team-a", "gb-w1", claim="train-channel-x7")
    pod(real_kube, "infer-0", "team-b", "gb-w1")
    pod(real_kube, "web-0", "team-a", "cpu-1")  # not a tray: not kept
    real_sync.step("pods")
    rows = {p.name: p for p in TrayPod.objects.all()}
    assert set(rows) == {"train-0", "infer-0"}
    assert rows["train-0"].claims == ["train-channel-x7"] and rows["train-0"].node == tray

    client.force_login(operator)
    page = client.get(reverse("operator:node", args=["gb-w1"])).content.decode()
    assert 'id="workloads"' in page
    assert 'data-pod="team-a/train-0"' in page and 'data-pod="team-b/infer-0"' in page
    assert "<code>train-channel-x7</code>" in page
    # A tenant sees only their own namespace's pods.
    assert [p.name for p in tray_pods(tenant_a, [tray.pk])] == ["train-0"]

    # A pod that finishes or is deleted leaves the tray, by watch.
    core = client_api(real_kube)
    core.patch_namespaced_pod_status("infer-0", "team-b", {"status": {"phase": "Succeeded"}})
    real_kube.delete("pods", "train-0", "team-a")
    real_sync.step("pods")
    assert not TrayPod.objects.exists()


def test_a_pod_deleted_while_the_watch_was_away_is_dropped_at_the_next_list(real_kube, real_sync):
    real_kube.put_node("gb-w2", labels=gpu_labels(), ip="10.2.0.2")
    real_sync.step("nodes")
    pod(real_kube, "train-1", "team-a", "gb-w2")
    real_sync.step("pods")
    assert TrayPod.objects.filter(name="train-1").exists()
    real_kube.delete("pods", "train-1", "team-a")
    real_sync["pods"].version = None  # the watch lost its place: the next step lists
    real_sync.step("pods")
    assert not TrayPod.objects.exists()


def client_api(kube: ClusterKube) -> client.CoreV1Api:
    return client.CoreV1Api(kube.api)
