"""Workloads in the shape of NVIDIA's examples, applied as a user applies them.

Each YAML file of `tests/kube/workloads` (or of the directory `NVIDIA_WORKLOADS_DIR` names,
e.g. a copy of NVIDIA's own examples) is one test: its ComputeDomain(s) and the pods or Jobs
naming their claim templates go to upstream's kube-apiserver unchanged, in one `kubectl
apply -n` into a namespace made a moment before. From there only the product and
Kubernetes act: the real `manage.py kube_sync` adopts the ComputeDomain, the real server,
Celery worker and beat place it and publish its ResourceClaimTemplate, node agents on
emulated trays form it and publish each tray's ResourceSlice, kube-scheduler alone puts
every pod on a tray (nothing in the manifests names one), and the kubelet's own DRA code on
every Node (`KubeletFleet`) prepares its claims. The test then checks, for every pod, that
it landed on one of its domain's trays (as the portal reports them, never arranged by the
test), that its claim was allocated there, and that each of its container's CDI device ids
resolves on that tray to the domain's channel: `channel0` in Single mode (as NVIDIA's
driver gives it), every channel of the tray in All mode. `kubectl delete -f` then releases
the domains, removes their templates and leaves every tray clean.

A file without a ComputeDomain (NVIDIA's CRD, say: the cluster has it installed already)
is skipped, saying so. Kubeflow's MPI operator is not run here: for an `MPIJob` the test
takes its Worker replica's pod template and runs it as a Job of `replicas` pods
(`restartPolicy: Never`, as a Job needs, when the replica names none); the Launcher is left
out (it holds no claim, and waits for a control-plane Node).
"""

from __future__ import annotations

import copy
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from domains.computedomains.models import (
    LIVE_PHASES,
    AllocationMode,
    ComputeDomain,
    DomainSource,
    Phase,
)
from domains.computedomains.selectors import domain_channels
from domains.inventory.models import Node, NodeSource
from domains.kube.dra import DOMAIN_UID_LABEL
from nodeagent.config import CHANNELS_DIR
from nodeagent.dra import CDI_CLAIM_KIND, DRIVER_NAME
from nodeagent.dra.slices import slice_name
from testbed import factories
from testbed.agents import AgentFleet
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import Cluster, ClusterKube, kube_binaries, wait_for
from testbed.kube.kubelet_dra import KubeletFleet
from testbed.kube.objects import RACK_LABEL, claim_of
from testbed.processes import (
    VENV_BIN,
    Proc,
    process_env,
    running,
    start_beat,
    start_server,
    start_worker,
)
from tests.support.cdi import resolve

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WORKLOADS_DIR = Path(os.environ.get("NVIDIA_WORKLOADS_DIR") or Path(__file__).parent / "workloads")
MANIFESTS = sorted([*WORKLOADS_DIR.glob("*.yaml"), *WORKLOADS_DIR.glob("*.yml")])
if not MANIFESTS:
    raise FileNotFoundError(f"no *.yaml manifests in {WORKLOADS_DIR} (NVIDIA_WORKLOADS_DIR)")

IP_PREFIX = factories.tray_ip_prefix(33)  # this module's loopback range
SPARE_TRAYS = 2  # trays no domain of the file should get a pod on
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
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


# --- the processes -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, cluster: Cluster) -> Iterator[str]:
    """The real server, Celery worker and beat, publishing to upstream's API server."""
    env = {"KUBECONFIG": str(cluster.kubeconfig), **ENV}
    server, url = start_server(**env)
    worker = start_worker(concurrency=4, **env)
    beat = start_beat(PORTAL_KUBE_RECONCILE_SECONDS="2", **env)
    with running(beat, worker, server):
        yield url


@pytest.fixture
def kube_sync(
    real_kube: ClusterKube, cluster: Cluster, portal: str
) -> Iterator[Callable[[], Proc]]:
    """`manage.py kube_sync` as production runs it, started once the test's Nodes and
    namespace are in the cluster (`start()`); stopped before `real_kube` cleans up."""
    procs: list[Proc] = []

    def start() -> Proc:
        argv = [str(VENV_BIN / "python"), "manage.py", "kube_sync", "--watch-timeout", "5"]
        proc = Proc("kube-sync", argv, process_env(KUBECONFIG=str(cluster.kubeconfig), **ENV))
        procs.append(proc)
        wait_for(lambda: "watching" in proc.log() or not proc.alive(), 30, "kube_sync to start")
        assert proc.alive(), proc.log()
        return proc

    yield start
    for proc in procs:
        proc.stop()


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    """Every Node's kubelet directory, under a short path (unix sockets: 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kw-") as tmp:
        yield Path(tmp)


def node_labels(tray: Node) -> dict[str, str]:
    """What GPU feature discovery labels the tray's Node with (the portal's own facts)."""
    assert tray.clique is not None and tray.rack is not None
    return {
        "nvidia.com/gpu.clique": tray.clique.label,
        "nvidia.com/gpu.count": str(tray.gpu_count),
        "nvidia.com/gpu.product": tray.gpu_product.replace(" ", "-"),  # as GFD writes it
        RACK_LABEL: tray.rack.name,
    }


# --- the checks ----------------------------------------------------------------------------


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


def domain_of(pod: dict[str, Any], domains: dict[str, ComputeDomain]) -> ComputeDomain:
    """The domain whose claim template the pod names (one per pod in these workloads)."""
    names = [c.get("resourceClaimTemplateName") for c in pod["spec"].get("resourceClaims") or []]
    (domain,) = [domains[name] for name in names if name in domains]
    return domain


def adopted(namespace: str, name: str, old: list[int]) -> ComputeDomain | None:
    return (
        ComputeDomain.objects.filter(namespace__name=namespace, name=name, phase__in=LIVE_PHASES)
        .exclude(pk__in=old)
        .first()
    )


def members_of(domain: ComputeDomain) -> set[str]:
    return set(domain.members.filter(active=True).values_list("node__hostname", flat=True))


def check_devices(
    fleet: AgentFleet, host: str, domain: ComputeDomain, cdi_ids: list[str], claim_uid: str
) -> None:
    """The container's CDI ids name the claim and resolve on the tray to the domain's
    channel(s): channel0 in Single mode, every channel of the tray in All mode."""
    assert set(cdi_ids) == {f"{CDI_CLAIM_KIND}={claim_uid}"}, cdi_ids
    root = fleet.tray_root(host)
    device = resolve([root / "var/run/cdi", root / "etc/cdi"], cdi_ids[0])
    nodes = device["containerEdits"]["deviceNodes"]
    major = fleet.proc_devices_major(host)
    on_tray = fleet.channel_devices(host)
    assert {(n["type"], n["major"]) for n in nodes} == {("c", major)}
    channels = domain_channels(domain)
    if domain.allocation_mode == AllocationMode.SINGLE:
        (node,) = nodes
        assert (node["path"], node["minor"]) == (f"/{CHANNELS_DIR}/channel0", 0)
        (channel,) = channels
        assert on_tray.get(f"channel{channel}") == (major, channel), sorted(on_tray)[:5]
        return
    assert sorted(n["minor"] for n in nodes) == channels == list(range(2048))  # as NVIDIA's
    for n in nodes:
        assert n["path"] == f"/{CHANNELS_DIR}/channel{n['minor']}"
        st = os.lstat(n["hostPath"])
        assert stat.S_ISCHR(st.st_mode)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, n["minor"])
        assert Path(n["hostPath"]).is_relative_to(root)


# --- the tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_a_workload_applied_unchanged_runs_on_its_domains_trays_with_its_channels(
    manifest, real_kube, cluster, portal, kube_sync, kubelet_root
):
    with Run(manifest, real_kube, cluster, portal, kube_sync, kubelet_root) as run:
        domains, pods = run.apply()
        run.delete(domains, pods)


@pytest.mark.parametrize("manifest", MANIFESTS[:1], ids=[p.name for p in MANIFESTS[:1]])
def test_a_workload_deleted_and_applied_again_at_once_runs_again(
    manifest, real_kube, cluster, portal, kube_sync, kubelet_root
):
    """`kubectl delete -f x.yaml && kubectl apply -f x.yaml`: the delete returns once the
    old ComputeDomain is gone (the portal's finalizer holds it until its domain let go of
    its trays and claim template), so the new pods' claims come from the new domain's
    template, never the old one's."""
    with Run(manifest, real_kube, cluster, portal, kube_sync, kubelet_root) as run:
        old, old_pods = run.apply()
        delete_workload(real_kube, run.workload, old_pods)
        new, pods = run.apply(replacing=old)
        run.delete(new, pods, ended=[*old.values()])


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
    ) -> None:
        # A namespace of its own, made just before the apply, as a user does: `kubectl
        # create namespace` and `kubectl apply -n` a moment apart.
        self.namespace = namespace_for(manifest)
        self.workload = read_workload(manifest, self.namespace)
        self.kube = kube
        install_device_class(kube)
        (rack,) = factories.make_racks(str(trays_needed(self.workload)), ip_prefix=IP_PREFIX)
        self.trays = list(
            Node.objects.filter(rack=rack).select_related("clique", "rack").order_by("slot")
        )
        for tray in self.trays:
            kube.put_node(tray.hostname, node_labels(tray), ip=tray.management_ip)
        self.sync = kube_sync()
        wait_for(
            lambda: (
                Node.objects.filter(rack=rack, source=NodeSource.KUBERNETES).count()
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


def check_pod(
    kube: ClusterKube,
    fleet: AgentFleet,
    pod: dict[str, Any],
    domains: dict[str, ComputeDomain],
    prepared: tuple[str, dict[str, list[str]]],
) -> None:
    """Placed by the scheduler alone on one of its domain's trays; its claim allocated and
    prepared there; its containers' CDI ids resolve there to the domain's channels."""
    spec = pod["spec"]
    assert not spec.get("affinity") and not spec.get("nodeSelector"), spec  # none in the file
    assert spec["schedulerName"] == "default-scheduler"
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["PodScheduled"] == "True"
    host = spec["nodeName"]
    domain = domain_of(pod, domains)
    members = members_of(domain)
    assert host in members, f"{pod['metadata']['name']} on {host}, {domain.name} has {members}"
    node, devices = prepared
    assert node == host

    claim = claim_of(kube, pod)
    assert claim is not None
    assert claim["metadata"]["labels"][DOMAIN_UID_LABEL] == str(domain.uid)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER_NAME, host)
    with_claims = [
        c["name"] for c in spec["containers"] if (c.get("resources") or {}).get("claims")
    ]
    assert sorted(devices) == sorted(with_claims)
    for cdi_ids in devices.values():
        check_devices(fleet, host, domain, cdi_ids, claim["metadata"]["uid"])


def check_ready(kube: ClusterKube, domain: ComputeDomain, hosts: set[str]) -> None:
    """Ready, in the portal and on its object, on its numNodes trays (placed) or on the
    trays its pods run on (one that follows its workload); `hosts`: its pods' trays."""
    # Its claims are prepared once each tray's daemon is ready; the portal's phase follows
    # with the agents' next reports.
    wait_for(
        lambda: ComputeDomain.objects.get(pk=domain.pk).phase == Phase.READY,
        30,
        f"{domain.name} Ready",
    )
    if domain.num_nodes > 0:
        assert len(members_of(domain)) == domain.num_nodes
    else:
        assert members_of(domain) == hosts

    def published_ready() -> dict[str, Any] | None:
        obj = kube.get("computedomains", domain.name, domain.namespace.name) or {}
        status = obj.get("status") or {}
        return status if status.get("status") == "Ready" else None

    status = wait_for(published_ready, 30, f"{domain.name} Ready on its object")
    assert {n["name"] for n in status["nodes"]} == members_of(domain)


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
