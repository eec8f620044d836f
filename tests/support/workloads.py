"""Running a workload file as a user runs it, on emulated trays of upstream's control plane
(tests/kube/test_nvidia_workloads.py says how, and what is checked).

`Run(manifest, …)` makes the file's trays (their Nodes labelled as GPU feature discovery
labels them), starts `kube_sync`, the agents and a kubelet per Node; `apply()` and
`delete()` are `kubectl apply -f` and `kubectl delete -f` with every check of a running and
a deleted workload. The fixtures it takes (`workload_portal`, `workload_sync`,
`kubelet_root`) are in tests/kube/conftest.py.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from domains.computedomains.models import (
    LIVE_PHASES,
    ComputeDomain,
    DomainSource,
    Phase,
)
from domains.inventory.models import Node, NodeSource
from domains.kube.dra import DOMAIN_UID_LABEL
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.slices import slice_name
from testbed import factories
from testbed.agents import AgentFleet
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import Cluster, ClusterKube, kube_binaries, wait_for
from testbed.kube.kubelet_dra import KubeletFleet
from testbed.kube.objects import RACK_LABEL, claim_of
from testbed.processes import Proc
from tests.support.workload_checks import check_pod, check_ready, domain_of, members_of

SPARE_TRAYS = 2  # trays no domain of the file should get a pod on
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# The portal's settings for these runs: Kubernetes on, racks from the Nodes' labels.
ENV = {"PORTAL_KUBE_ENABLED": "1", "PORTAL_KUBE_RACK_LABEL": RACK_LABEL}


# --- the manifests -----------------------------------------------------------------------


@dataclass
class Workload:
    """One file's objects as applied, and the pods they make: bare pods by name, a Job's by
    its name and parallelism."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    domains: list[dict[str, Any]] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    jobs: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def workers_job(mpijob: dict[str, Any]) -> dict[str, Any]:
    """The MPIJob's Worker replicas as a Job (no MPI operator here; see the module's doc)."""
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]
    replicas = int(worker.get("replicas", 1))
    template = copy.deepcopy(worker["template"])
    template["spec"].setdefault("restartPolicy", worker.get("restartPolicy") or "Never")
    if template["spec"]["restartPolicy"] == "Always":
        template["spec"]["restartPolicy"] = "Never"  # a Job refuses Always
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{mpijob['metadata']['name']}-worker"},
        "spec": {"parallelism": replicas, "completions": replicas, "template": template},
    }


def read_workload(path: Path, namespace: str) -> Workload:
    found = Workload()
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    if not any(doc["kind"] == "ComputeDomain" for doc in docs):
        kinds = ", ".join(sorted({doc["kind"] for doc in docs})) or "nothing"
        pytest.skip(f"{path.name} is no workload: no ComputeDomain ({kinds})")
    for doc in docs:
        kind = doc["kind"]
        if kind == "MPIJob":
            found.notes.append(
                f"MPIJob {doc['metadata']['name']}: its Worker replicas run as a Job "
                "(no MPI operator here), its Launcher is left out"
            )
            doc = workers_job(doc)
            kind = "Job"
        doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
        if kind == "ComputeDomain":
            found.domains.append(doc)
        elif kind == "Pod":
            found.pods.append(doc["metadata"]["name"])
        elif kind == "Job":
            spec = doc["spec"]
            found.jobs[doc["metadata"]["name"]] = min(
                int(spec.get("parallelism", 1)), int(spec.get("completions", 1))
            )
        else:
            raise ValueError(f"{path.name}: a {kind} is not a workload this test can run")
        found.objects.append(doc)
    return found


def trays_needed(workload: Workload) -> int:
    """Every domain's trays (a domain that follows its workload: one per pod at most), and
    some that must stay empty."""
    pods = len(workload.pods) + sum(workload.jobs.values())
    placed = sum(int(d["spec"].get("numNodes") or 0) for d in workload.domains)
    return max(placed, pods) + SPARE_TRAYS


def node_labels(tray: Node) -> dict[str, str]:
    """What GPU feature discovery labels the tray's Node with (the portal's own facts)."""
    assert tray.clique is not None and tray.rack is not None
    return {
        "nvidia.com/gpu.clique": tray.clique.label,
        "nvidia.com/gpu.count": str(tray.gpu_count),
        "nvidia.com/gpu.product": tray.gpu_product.replace(" ", "-"),  # as GFD writes it
        RACK_LABEL: tray.rack.name,
    }


# --- the pods and the domains ------------------------------------------------------------


def pods_of(kube: ClusterKube, workload: Workload, namespace: str) -> list[dict[str, Any]] | None:
    """Every pod the workload makes, once all exist."""
    found = [kube.get("pods", name, namespace) for name in workload.pods]
    for job, count in workload.jobs.items():
        listed = kube.resource("pods").get(
            namespace=namespace, label_selector=f"{JOB_NAME_LABEL}={job}"
        )
        items = [item.to_dict() for item in listed.items]
        if len(items) < count:
            return None
        found += items
    if any(pod is None for pod in found):
        return None
    return [pod for pod in found if pod is not None]


def adopted(namespace: str, name: str, old: list[int]) -> ComputeDomain | None:
    return (
        ComputeDomain.objects.filter(namespace__name=namespace, name=name, phase__in=LIVE_PHASES)
        .exclude(pk__in=old)
        .first()
    )


class Run:
    """One file's workload on its own trays: the Nodes, kube_sync, the agents and a kubelet
    per Node; `apply()` and `delete()` as a user runs `kubectl apply -f` and `delete -f`."""

    def __init__(
        self,
        manifest: Path,
        kube: ClusterKube,
        cluster: Cluster,
        portal: str,
        kube_sync: Callable[[], Proc],
        kubelet_root: Path,
        *,
        ip_prefix: str,
        layouts: Sequence[str] = (),
    ) -> None:
        """`ip_prefix`: the test module's loopback range; `layouts`: the racks' NVLink
        partitions (`RackLayout`), by default one rack of one clique with every tray the
        file needs."""
        # A namespace of its own, made just before the apply, as a user does: `kubectl
        # create namespace` and `kubectl apply -n` a moment apart.
        self.namespace = namespace_for(manifest)
        self.workload = read_workload(manifest, self.namespace)
        self.kube = kube
        install_device_class(kube)
        layouts = layouts or (str(trays_needed(self.workload)),)
        racks = factories.make_racks(*layouts, ip_prefix=ip_prefix)
        self.trays = list(
            Node.objects.filter(rack__in=racks)
            .select_related("clique", "rack")
            .order_by("rack__name", "slot")
        )
        for tray in self.trays:
            kube.put_node(tray.hostname, node_labels(tray), ip=tray.management_ip)
        self.sync = kube_sync()
        wait_for(
            lambda: (
                Node.objects.filter(rack__in=racks, source=NodeSource.KUBERNETES).count()
                == len(self.trays)
            ),
            30,
            "kube_sync to see the Nodes",
        )
        self.fleet = AgentFleet(
            portal, self.trays, kubelet_dir=kubelet_root, kubeconfig=cluster.kubeconfig
        )
        self.kubelets = KubeletFleet(kube_binaries(), self.fleet, kubeconfig=cluster.kubeconfig)

    def __enter__(self) -> Run:
        self.fleet.start()
        try:
            self.kubelets.start()
            self.fleet.wait_joined()
            self.kubelets.wait_registered(DRIVER_NAME)
            for tray in self.trays:
                wait_for(
                    lambda t=tray: self.kube.get("resourceslices", slice_name(t.hostname)),
                    30,
                    f"{tray.hostname}'s slice",
                )
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.kubelets.stop()
        self.fleet.__exit__()

    def apply(
        self, replacing: dict[str, ComputeDomain] | None = None
    ) -> tuple[dict[str, ComputeDomain], list[dict[str, Any]]]:
        """`kubectl apply -n <namespace> -f <file>`, then every check of a running workload;
        the domains by claim template name, and the pods. `replacing`: domains of these
        names that may still release (not the ones to wait for)."""
        kube, namespace = self.kube, self.namespace
        kube.put_namespace(namespace)
        for obj in self.workload.objects:
            kube.apply(obj)
        old = [d.pk for d in (replacing or {}).values()]
        domains = {
            obj["spec"]["channel"]["resourceClaimTemplate"]["name"]: wait_for(
                lambda n=obj["metadata"]["name"]: adopted(namespace, n, old),
                30,
                f"ComputeDomain {obj['metadata']['name']} adopted; kube_sync said:\n"
                f"{self.sync.log()[-2000:]}",
            )
            for obj in self.workload.domains
        }
        assert {d.source for d in domains.values()} == {DomainSource.KUBERNETES}

        pods = wait_for(lambda: pods_of(kube, self.workload, namespace), 60, "the pods")
        prepared = all_prepared(kube, self.kubelets, pods, domains)
        for domain in domains.values():
            domain.refresh_from_db()
        owner = {}
        for pod_seen in pods:
            pod = kube.get("pods", pod_seen["metadata"]["name"], namespace)
            assert pod is not None
            owner[pod["metadata"]["uid"]] = domain_of(pod, domains)
            check_pod(kube, self.fleet, pod, domains, prepared[pod["metadata"]["uid"]])

        trays = {t.hostname for t in self.trays}
        spare = trays - set().union(*map(members_of, domains.values()))
        assert len(spare) >= SPARE_TRAYS
        assert not {n for n, _ in prepared.values()} & spare
        for domain in domains.values():
            hosts = {n for uid, (n, _) in prepared.items() if owner[uid] == domain}
            check_ready(kube, domain, hosts)
        return domains, pods

    def delete(
        self,
        domains: dict[str, ComputeDomain],
        pods: list[dict[str, Any]],
        ended: Sequence[ComputeDomain] = (),
    ) -> None:
        """`kubectl delete -f <file>`: every claim unprepared, the domains (and `ended`)
        released, their claim templates removed, every tray left clean."""
        delete_workload(self.kube, self.workload, pods)
        for pod in pods:
            uid = pod["metadata"]["uid"]
            wait_for(lambda u=uid: self.kubelets.unprepared(u), 30, "unprepared")
        for domain in [*domains.values(), *ended]:
            wait_for(
                lambda d=domain: ComputeDomain.objects.get(pk=d.pk).phase == Phase.RELEASED,
                60,
                f"{domain.name} released",
            )
        for domain in domains.values():
            wait_for(
                lambda d=domain: (
                    self.kube.get(
                        "resourceclaimtemplates", d.resource_claim_template, self.namespace
                    )
                    is None
                ),
                30,
                f"{domain.name}'s claim template removed",
            )
        for tray in self.trays:
            assert self.fleet.leftovers(tray.hostname) == []


def namespace_for(manifest: Path) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", manifest.stem.lower()).strip("-")
    return f"wl-{slug}"[:63].rstrip("-")


def all_prepared(
    kube: ClusterKube,
    kubelets: KubeletFleet,
    pods: list[dict[str, Any]],
    domains: dict[str, ComputeDomain],
) -> dict[str, tuple[str, dict[str, list[str]]]]:
    uids = [pod["metadata"]["uid"] for pod in pods]
    try:
        return kubelets.wait_all_prepared(uids, timeout=60)
    except TimeoutError:
        states = {
            str(d.uid): (d.name, d.phase, d.reason, d.message)
            for d in ComputeDomain.objects.filter(pk__in=[d.pk for d in domains.values()])
        }
        failures = {uid: kubelets.failures(uid)[-1:] for uid in uids}
        pending = {}
        for seen in pods:
            pod = kube.get("pods", seen["metadata"]["name"], seen["metadata"]["namespace"]) or {}
            claim = claim_of(kube, pod) if pod else None
            pending[seen["metadata"]["name"]] = {
                "node": (pod.get("spec") or {}).get("nodeName"),
                "claim of domain": ((claim or {}).get("metadata") or {})
                .get("labels", {})
                .get(DOMAIN_UID_LABEL),
                "allocated": bool(((claim or {}).get("status") or {}).get("allocation")),
            }
        raise AssertionError(
            f"not all prepared: domains {states}, failures {failures}, pods {pending}"
        )


def delete_workload(kube: ClusterKube, workload: Workload, pods: list[dict[str, Any]]) -> None:
    """`kubectl delete -f`, in the file's order. No kubelet here stops containers, so the
    pods go at once (as a kubelet confirms a stopped pod); and the garbage collector does
    not run here, so what it would delete with its owner is deleted by hand: a Job's pods,
    and every pod's generated ResourceClaims (the resourceclaim controller leaves those of
    a pod that is gone to the garbage collector)."""
    for obj in workload.objects:
        meta = obj["metadata"]
        plural = {"ComputeDomain": "computedomains", "Pod": "pods", "Job": "jobs"}[obj["kind"]]
        kube.delete(plural, meta["name"], meta["namespace"])
        if obj["kind"] == "Job":
            for pod in pods:
                if (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == meta["name"]:
                    kube.delete("pods", pod["metadata"]["name"], meta["namespace"])
    gone = {pod["metadata"]["uid"] for pod in pods}
    for claim in kube.resource("resourceclaims").get().items:
        if any(owner.uid in gone for owner in claim.metadata.ownerReferences or []):
            kube.delete("resourceclaims", claim.metadata.name, claim.metadata.namespace)
    # kubectl waits until what it deleted is gone (`--wait`, its default): a ComputeDomain
    # only once its domain let go of its trays and its claim template (the finalizer). (A
    # Job keeps the orphan finalizer that only the garbage collector, not run here, lifts.)
    for obj in workload.objects:
        meta = obj["metadata"]
        plural = {"ComputeDomain": "computedomains", "Pod": "pods"}.get(obj["kind"])
        if plural:
            wait_for(
                lambda p=plural, m=meta: kube.get(p, m["name"], m["namespace"]) is None,
                60,
                f"{obj['kind']} {meta['name']} gone",
            )
