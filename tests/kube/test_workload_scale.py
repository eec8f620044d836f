"""An 18-pod workload on a domain that follows it, scaled down to 9 while the clique grows.

Upstream's control plane (`cluster`: kube-apiserver, kube-scheduler, the resourceclaim and
job controllers), the real server and Celery worker publishing to it, one rack of 18
emulated trays whose agents are DRA kubelet plugins, every agent and IMEX runner in a pod of
its own (`AgentFleet(pods=True)`), and the kubelet's own DRA code for every Node
(`KubeletFleet`). The tenant asks for a `numNodes: 0` domain over the REST API and runs a
Job of 18 pods that names its claim template, as NVIDIA's examples do: kube-scheduler alone
spreads the pods over the trays, every kubelet prepares its pod's claim, and the domain
forms with one daemon start per tray. Then the tenant lowers the Job's parallelism to 9
(`kubectl patch job`: the job controller deletes 9 pods), and meanwhile a new tray is
added to the clique (its Kubernetes Node labelled with the clique, its agent joining): the
9 trays whose pods stay never restart their daemon.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from domains.agents.desired import desired_state_for
from domains.computedomains.models import LIVE_PHASES, ComputeDomain, Phase
from domains.inventory.models import Node
from domains.inventory.seed import tray_ip
from nodeagent.dra import CDI_CLAIM_KIND, DRIVER_NAME
from nodeagent.dra.slices import slice_name
from testbed import factories
from testbed.agents import AgentFleet
from testbed.emulator.tray import GpuFacts, TrayFacts, daemon_starts
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import ClusterKube, kube_binaries, wait_for
from testbed.kube.kubelet_dra import KubeletFleet
from testbed.kube.objects import claim_of, gpu_labels, job_with_claims
from testbed.processes import Proc, pods_supported
from testbed.trays import Tray

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not pods_supported(), reason="pods need root and util-linux's unshare"),
]

IP_PREFIX = factories.tray_ip_prefix(34)  # this module's loopback range
NAMESPACE = "scale"
TRAYS = 18


def job(name: str, template: str, pods: int) -> dict[str, Any]:
    """A Job of `pods` workers, each with a claim from the domain's template and nothing
    else: no affinity, no node selector (NVIDIA's examples write it so)."""
    return job_with_claims(name, NAMESPACE, template, pods)


def job_pods(kube: ClusterKube, name: str) -> list[dict[str, Any]]:
    """The Job's pods that are not being deleted, bound or not."""
    core = client.CoreV1Api(kube.api)
    selector = f"batch.kubernetes.io/job-name={name}"
    found = core.list_namespaced_pod(NAMESPACE, label_selector=selector)
    pods = [kube.api.sanitize_for_serialization(p) for p in found.items]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def pod_process(proc: Proc) -> int:
    """The first process of a pod: the one `unshare --fork` started, pid 1 inside."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return int(children[0])


def pid_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def test_an_18_pod_workload_forms_its_domain_and_scaling_it_to_9_restarts_no_daemon_that_stays(
    real_kube, cluster, portal, tenant_api
):
    began = time.monotonic()
    real_kube.put_namespace(NAMESPACE)
    install_device_class(real_kube)
    (rack,) = factories.make_racks(str(TRAYS), ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    clique = nodes[0].clique
    assert clique is not None
    labels = gpu_labels(**{"nvidia.com/gpu.clique": clique.label})
    for node in nodes:
        real_kube.put_node(node.hostname, labels, ip=node.management_ip or "")

    with (
        tempfile.TemporaryDirectory(prefix="kd-") as kubelet_dir,  # unix sockets: 107 bytes
        AgentFleet(
            portal, nodes, kubelet_dir=Path(kubelet_dir), kubeconfig=cluster.kubeconfig, pods=True
        ) as fleet,
        KubeletFleet(kube_binaries(), fleet, kubeconfig=cluster.kubeconfig) as kubelets,
        contextlib.ExitStack() as stack,
    ):
        fleet.wait_joined(timeout=120)
        kubelets.wait_registered(DRIVER_NAME, timeout=60)
        for node in nodes:
            wait_for(
                lambda n=node: real_kube.get("resourceslices", slice_name(n.hostname)),
                30,
                f"{node.hostname}'s slice",
            )
        resp = tenant_api.post(
            "/computedomains/", json={"metadata": {"name": "train"}, "spec": {"numNodes": 0}}
        )
        assert resp.status_code == 201, resp.text
        domain = ComputeDomain.objects.get(
            namespace__name=NAMESPACE, name="train", phase__in=LIVE_PHASES
        )
        template = domain.resource_claim_template
        wait_for(
            lambda: real_kube.get("resourceclaimtemplates", template, NAMESPACE),
            30,
            "the claim template",
        )

        # 18 pods: kube-scheduler puts one on every tray, every kubelet prepares its claim.
        real_kube.apply(job("train", template, TRAYS))
        wait_for(lambda: len(job_pods(real_kube, "train")) == TRAYS, 30, "18 pods")
        pods = job_pods(real_kube, "train")
        prepared = kubelets.wait_all_prepared([p["metadata"]["uid"] for p in pods], timeout=120)
        on = {uid: node for uid, (node, _) in prepared.items()}
        assert sorted(on.values()) == sorted(n.hostname for n in nodes)  # one per tray
        for pod in pods:
            uid = pod["metadata"]["uid"]
            claim = claim_of(real_kube, real_kube.get("pods", pod["metadata"]["name"], NAMESPACE))
            assert claim is not None
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert (result["driver"], result["pool"]) == (DRIVER_NAME, on[uid])
            assert prepared[uid][1] == {"ctr": [f"{CDI_CLAIM_KIND}={claim['metadata']['uid']}"]}

        def phase() -> str:
            domain.refresh_from_db()
            return domain.phase

        wait_for(lambda: phase() == Phase.READY, 60, "the domain of 18 Ready")
        assert domain.members.filter(active=True).count() == TRAYS
        hosts = [n.hostname for n in nodes]
        pids = {host: fleet.daemon_pid(host) for host in hosts}
        assert all(pids.values()), pids
        assert {host: daemon_starts(fleet.tray_root(host)) for host in hosts} == dict.fromkeys(
            hosts, 1
        )
        # Agent and runner are pods of their own: the daemons live in their runners' PID
        # namespaces, none of them the agents' (nor this test's).
        agents_ns = pid_namespace(pod_process(fleet.proc))
        runner_ns = {host: pid_namespace(pod_process(fleet.runners[host])) for host in hosts}
        assert agents_ns != pid_namespace(os.getpid())
        assert len(set(runner_ns.values())) == TRAYS
        for host in hosts:
            assert pid_namespace(pids[host]) == runner_ns[host] != agents_ns

        # Scaled to 9 (`kubectl patch job train -p '{"spec":{"parallelism":9}}'`) while a
        # new tray joins the clique: a Kubernetes Node with its label, and its agent.
        real_kube.resource("jobs").patch(
            name="train",
            namespace=NAMESPACE,
            body={"spec": {"parallelism": TRAYS // 2}},
            content_type="application/merge-patch+json",
        )
        newcomer = TrayFacts(
            hostname=f"{rack.name}-t{TRAYS + 1:02d}",
            ip=tray_ip(IP_PREFIX, 1, TRAYS + 1),
            cluster_uuid=clique.cluster_uuid,
            clique_id=clique.clique_id,
            gpus=[GpuFacts(index=i, uuid=f"GPU-newcomer-{i}") for i in range(4)],
        )
        real_kube.put_node(newcomer.hostname, labels, ip=newcomer.ip)
        tray = stack.enter_context(
            Tray(portal, newcomer, root=Path(fleet.root) / newcomer.hostname)
        )
        tray.wait_ready()
        assert Node.objects.filter(clique=clique).count() == TRAYS + 1

        wait_for(lambda: len(job_pods(real_kube, "train")) == TRAYS // 2, 60, "9 pods deleted")
        stayed = {on[p["metadata"]["uid"]] for p in job_pods(real_kube, "train")}
        left = set(hosts) - stayed
        assert len(stayed) == len(left) == TRAYS // 2
        for uid, host in on.items():
            if host in left:
                wait_for(
                    lambda h=host, u=uid: any(
                        e["event"] == "unprepared" and e["uid"] == u for e in kubelets[h].events()
                    ),
                    60,
                    f"{host}'s claim unprepared",
                )
        wait_for(lambda: domain.members.filter(active=True).count() == TRAYS // 2, 60, "9 members")
        for host in left:
            wait_for(lambda h=host: fleet.leftovers(h) == [], 60, f"{host} clean")
        wait_for(lambda: phase() == Phase.READY, 60, "the domain of 9 Ready")
        # The clique's growth is in every member's desired state (its slot count counts the
        # clique's trays), and every agent has read it: each polls its desired state every
        # `poll_interval` (2 s), nudged or not. No daemon that stayed was restarted, for the
        # newcomer or for the 9 that left.
        member = next(n for n in nodes if n.hostname in stayed)
        assert desired_state_for(member)["domain"]["slots"] == TRAYS + 1
        time.sleep(3 * fleet.poll_interval)
        for host in stayed:
            assert fleet.daemon_pid(host) == pids[host]
            assert daemon_starts(fleet.tray_root(host)) == 1

        # The workload goes, then the domain.
        real_kube.delete_all("jobs")
        real_kube.delete_all("pods")
        resp = tenant_api.delete("/computedomains/train/")
        assert resp.status_code in (200, 202), resp.text
        wait_for(lambda: phase() == Phase.RELEASED, 60, "the domain Released")
        for host in stayed:
            wait_for(lambda h=host: fleet.leftovers(h) == [], 60, f"{host} clean")
    print(f"\n18-pod workload scaled to 9: {time.monotonic() - began:.1f} s")
