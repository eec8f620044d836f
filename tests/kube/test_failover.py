"""NVIDIA's failover scenarios, end to end on upstream's control plane: a Job of three
workers on a placed domain of three trays, with a spare, survives a worker pod force-deleted,
every IMEX daemon of the domain killed, and one of its trays dying and being marked down
under it; each time the job's pods end with their claims prepared on live trays of the
domain, by the kubelet's own DRA code, placed by kube-scheduler alone.

Upstream's control plane here runs the job controller and the resourceclaim controller, not
the node lifecycle controller: where it would evict the pods of a dead Node, the test
force-deletes them, as that controller (or `kubectl delete pod --force`) does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import (
    LIVE_PHASES,
    ComputeDomain,
    DomainClaim,
    DomainMember,
    Phase,
)
from domains.computedomains.trays import tray_act
from domains.inventory.models import Node
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.slices import slice_name
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import Cluster, ClusterKube, kube_binaries
from testbed.kube.kubelet_dra import KubeletDra, KubeletFleet
from testbed.kube.objects import claim_of, gpu_labels, job_with_claims
from testbed.processes import running, start_beat, start_server, start_worker
from tests.e2e.conftest import phase_of

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(36)  # this module's loopback range
NAMESPACE = "failover"
JOB = "workers"
JOB_LABEL = "batch.kubernetes.io/job-name"
# The agents here report every 5 s (AgentFleet's default): graces well above that; the
# tray that dies is marked down, which needs no grace.
TIMING = {
    "PORTAL_HEARTBEAT_INTERVAL_S": "2",
    "PORTAL_HEARTBEAT_STALE_S": "15",
    "PORTAL_FAILOVER_GRACE_S": "30",
    "PORTAL_RECONCILE_SECONDS": "1",
    "PORTAL_REAP_SECONDS": "1",
    "PORTAL_KUBE_RECONCILE_SECONDS": "2",
}


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, cluster: Cluster) -> Iterator[str]:
    """The real server, worker and beat publishing to upstream's API server, with short
    heartbeat and failover graces."""
    env = {"KUBECONFIG": str(cluster.kubeconfig), "PORTAL_KUBE_ENABLED": "1", **TIMING}
    server, url = start_server(**env)
    worker = start_worker(concurrency=4, **env)
    beat = start_beat(**env)
    with running(beat, worker, server):
        yield url


@pytest.fixture
def kube(real_kube: ClusterKube) -> ClusterKube:
    real_kube.put_namespace(NAMESPACE)
    install_device_class(real_kube)
    return real_kube


@contextlib.contextmanager
def two_fleets(
    portal: str, kube: ClusterKube, nodes: list[Node], kubelet_dirs
) -> Iterator[tuple[AgentFleet, AgentFleet, dict[str, KubeletDra]]]:
    """The first tray's agent in a process of its own (so that it can die as a crashed
    agent does: killed, its slice left behind), the others' in another; every Node's
    kubelet; entered once every plugin registered and every slice is published."""
    kubeconfig = kube.cluster.kubeconfig
    for node in nodes:
        kube.put_node(node.hostname, gpu_labels())
    lone = AgentFleet(
        portal, nodes[:1], kubelet_dir=kubelet_dirs, kubeconfig=kubeconfig, name="victim"
    )
    rest = AgentFleet(portal, nodes[1:], kubelet_dir=kubelet_dirs, kubeconfig=kubeconfig)
    with (
        KubeletFleet(kube_binaries(), lone, kubeconfig=kubeconfig) as lone_kubelets,
        KubeletFleet(kube_binaries(), rest, kubeconfig=kubeconfig) as rest_kubelets,
        lone,
        rest,
    ):
        for fleet, kubelets in ((lone, lone_kubelets), (rest, rest_kubelets)):
            fleet.wait_joined()
            kubelets.wait_registered(DRIVER_NAME)
        for node in nodes:
            host = node.hostname
            wait_for(lambda h=host: kube.get("resourceslices", slice_name(h)), 30, f"{host} slice")
        yield lone, rest, {**lone_kubelets.kubelets, **rest_kubelets.kubelets}


def job(template: str, pods: int) -> dict[str, Any]:
    """A Job of `pods` workers as NVIDIA's failover test runs them: each holds a claim from
    the domain's template; nothing names a tray."""
    return job_with_claims(JOB, NAMESPACE, template, pods, backoffLimit=10)


def workers(kube: ClusterKube) -> list[dict[str, Any]]:
    """The job's pods that are not on their way out."""
    listed = kube.resource("pods").get(namespace=NAMESPACE, label_selector=f"{JOB_LABEL}={JOB}")
    pods = [p.to_dict() for p in listed.items]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def live_members(domain: ComputeDomain) -> set[str]:
    return set(
        DomainMember.objects.filter(domain=domain, active=True).values_list(
            "node__hostname", flat=True
        )
    )


def all_on_live_trays(
    kube: ClusterKube,
    kubelets: dict[str, KubeletDra],
    domain: ComputeDomain,
    dead: set[str],
    pods: int,
) -> dict[str, str] | None:
    """pod name → tray, once the job has `pods` workers, each bound to a live tray of the
    domain whose kubelet prepared its claim, allocated on that tray's device."""
    found = workers(kube)
    if len(found) != pods:
        return None
    members = live_members(domain) - dead
    on: dict[str, str] = {}
    for pod in found:
        host = (pod.get("spec") or {}).get("nodeName")
        if host not in members or kubelets[host].prepared(pod["metadata"]["uid"]) is None:
            return None
        claim = claim_of(kube, pod) or {}
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        if [r["pool"] for r in results.get("results", [])] != [host]:
            return None
        on[pod["metadata"]["name"]] = host
    return on


def force_delete(kube: ClusterKube, name: str) -> None:
    """`kubectl delete pod --force --grace-period=0` (what the node lifecycle controller's
    eviction of a dead Node's pods amounts to here)."""
    core = client.CoreV1Api(kube.cluster.api_client())
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_nvidias_failover_scenarios_end_with_every_worker_prepared_on_a_live_tray(
    portal, tenant_api, kube, kubelet_dirs
):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    with two_fleets(portal, kube, nodes, kubelet_dirs) as (lone, rest, kubelets):
        made = tenant_api.post(
            "/computedomains/", json={"metadata": {"name": "train"}, "spec": {"numNodes": 3}}
        )
        assert made.status_code == 201, made.text
        domain = ComputeDomain.objects.get(
            namespace__name=NAMESPACE, name="train", phase__in=LIVE_PHASES
        )
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        template = f"{domain.name}-channel"
        wait_for(lambda: kube.get("resourceclaimtemplates", template, NAMESPACE), 20, "template")
        kube.apply(job(template, 3))

        def settled(dead: set[str] = frozenset(), what: str = "") -> dict[str, str]:
            return wait_for(
                lambda: all_on_live_trays(kube, kubelets, domain, set(dead), 3),
                90,
                f"every worker prepared on a live tray {what}",
            )

        first = settled(what="at the start")
        assert set(first.values()) == live_members(domain)

        # 1. A worker pod force-deleted: the job's new worker is prepared on a live tray.
        gone = sorted(first)[0]
        force_delete(kube, gone)
        after = settled(what="after a worker was force-deleted")
        assert gone not in after

        # 2. Every IMEX daemon of the domain killed: the agents start them again, the
        #    domain is Ready again, the workers' claims stay prepared where they were.
        for host in live_members(domain):
            (lone if host == nodes[0].hostname else rest).kill_daemon(host)
        wait_for(lambda: phase_of(domain) == Phase.DEGRADED, 30, "Degraded")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "Ready again")
        assert settled(what="after every daemon was killed") == after

        # 3. A tray dies under the running job (its kubelet, its agent killed as a crash
        #    leaves it, its daemon) and an operator marks it down: the domain gets the spare
        #    tray in its place, the dead tray's slice (which still names the domain: no
        #    agent is left to change it) is withdrawn, and the worker the dead Node's
        #    eviction removes is scheduled onto the new tray by kube-scheduler alone.
        dead = nodes[0].hostname
        assert dead in live_members(domain)  # best fit took slots 1-3
        (spare,) = {n.hostname for n in nodes} - live_members(domain)
        kubelets[dead].stop()
        lone.kill_agents()
        lone.kill_daemon(dead)
        assert kube.get("resourceslices", slice_name(dead)) is not None
        operator = factories.make_user("failover-operator", staff=True)
        actor = Actor.for_user(operator)
        node = Node.objects.get(hostname=dead)
        tray_act(actor=actor, node=node, action="drain")
        tray_act(actor=actor, node=node, action="mark_down", reason="PSU fault")
        wait_for(lambda: spare in live_members(domain), 30, f"{dead} replaced by {spare}")
        said = Event.objects.get(domain=domain, verb="domain.member_replaced").message
        assert said.startswith(f"{dead} replaced by {spare}")
        wait_for(lambda: kube.get("resourceslices", slice_name(dead)) is None, 30, "withdrawn")
        for name, host in after.items():
            if host == dead:
                force_delete(kube, name)
        last = settled({dead}, what=f"after {dead} died")
        assert spare in last.values() and dead not in last.values()
        assert set(last.values()) == live_members(domain)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "Ready on the new tray")
        released = DomainClaim.objects.filter(domain=domain, node=node)
        assert released.exists() and not released.filter(released_at__isnull=True).exists()
        slice_ = kube.get("resourceslices", slice_name(spare)) or {}
        assert slice_.get("spec", {}).get("driver") == DRIVER_NAME
