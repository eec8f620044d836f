"""End to end on real processes: a GitOps user's ComputeDomain forms on trays that came from
Kubernetes Nodes, its status reaches the object, and `kubectl delete` releases it.

Real `manage.py kube_sync`, web server, Celery worker and node agents (emulated IMEX), and
upstream's API server. The trays come from Kubernetes Nodes, their GPUs from what their
agents report. Trays use this suite's loopback range 127.15.<rack>.<slot>.
"""

from __future__ import annotations

import pytest

from domains.computedomains.models import ComputeDomain, DomainSource, Phase
from domains.inventory.models import Node, NodeSource
from domains.kube.crd import PHASE_ANNOTATION, UID_ANNOTATION
from domains.tenancy.models import Namespace
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from testbed.kube.cluster import ClusterKube
from testbed.kube.objects import computedomain, gpu_labels
from testbed.kube.schemas import assert_valid_computedomain
from testbed.processes import (
    VENV_BIN,
    Proc,
    process_env,
    running,
    start_server,
    start_worker,
)

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TRAYS = [(f"k8s-r1-t{slot}", f"{factories.tray_ip_prefix(15)}.1.{slot}") for slot in range(1, 5)]


def start_kube_sync(env: dict[str, str]) -> Proc:
    argv = [str(VENV_BIN / "python"), "manage.py", "kube_sync", "--watch-timeout", "5"]
    proc = Proc("kube-sync", argv, process_env(**env))
    wait_for(lambda: "watching" in proc.log() or not proc.alive(), 30, "kube_sync to start")
    assert proc.alive(), proc.log()
    return proc


def test_a_kubectl_computedomain_forms_on_kubernetes_trays_and_kubectl_delete_releases_it(
    real_kube: ClusterKube, cluster
):
    kube = real_kube  # what `kubectl` does, against upstream's API server
    env = {
        "KUBECONFIG": str(cluster.kubeconfig),
        "PORTAL_KUBE_ENABLED": "1",
        "PORTAL_KUBE_RACK_LABEL": "topology.kubernetes.io/rack",
    }
    for hostname, ip in TRAYS:
        kube.put_node(hostname, gpu_labels(clique=7, rack="r1"), ip=ip)
    kube.put_namespace("gitops")
    sync = start_kube_sync(env)
    server, url = start_server(**env)
    worker = start_worker(concurrency=4, **env)
    with running(sync, worker, server):
        wait_for(
            lambda: Node.objects.filter(source=NodeSource.KUBERNETES).count() == 4, 30, "trays"
        )
        ns = wait_for(lambda: Namespace.objects.filter(name="gitops").first(), 30, "namespace")
        with AgentFleet(url, Node.objects.filter(source=NodeSource.KUBERNETES)) as fleet:
            fleet.wait_joined()
            kube.apply(computedomain("train", "gitops", num_nodes=4))

            domain = wait_for(
                lambda: ComputeDomain.objects.filter(namespace=ns, name="train").first(),
                30,
                f"the ComputeDomain adopted; kube_sync said:\n{sync.log()[-2000:]}",
            )
            assert domain.source == DomainSource.KUBERNETES

            def published_ready() -> dict | None:
                obj = kube.get("computedomains", "train", "gitops") or {}
                annotations = obj.get("metadata", {}).get("annotations") or {}
                return obj if annotations.get(PHASE_ANNOTATION) == "Ready" else None

            obj = wait_for(published_ready, 60, "the portal's Ready mirrored onto the object")
            assert obj["metadata"]["annotations"][UID_ANNOTATION] == str(domain.uid)
            # Its four trays formed before any pod: NVIDIA's status counts the workload's.
            assert obj["status"] == {"status": "NotReady"}
            members = domain.members.filter(active=True).values_list("node__hostname", flat=True)
            assert sorted(members) == [h for h, _ in TRAYS]
            assert_valid_computedomain(
                {k: obj[k] for k in ("apiVersion", "kind", "spec", "status")}
            )

            kube.delete("computedomains", "train", "gitops")  # kubectl delete
            domain.refresh_from_db()
            wait_for(
                lambda: ComputeDomain.objects.get(pk=domain.pk).phase == Phase.RELEASED,
                60,
                "the domain released",
            )
            for hostname, _ in TRAYS:
                assert fleet.leftovers(hostname) == []
    assert kube.get("computedomains", "train", "gitops") is None
