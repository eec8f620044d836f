"""DRA: 18 pods' channel claims prepared by the node agents, for a domain that follows its
workload (numNodes 0), 18 trays at once (or 18 per rack over `--racks N`); against
upstream's Kubernetes and against the stand-ins.

Everything real except the hardware: the ASGI server, a Celery worker (publishing the
ComputeDomain and its ResourceClaimTemplate), PostgreSQL (BENCH_DATABASE_URL), Redis, and
one agent fleet whose agents are DRA kubelet plugins on emulated trays. Each round requests
a numNodes 0 domain over the REST API, gets 18 claims prepared on 18 trays (each: the tray
joined the domain, its IMEX daemon is READY, the channel exists, the CDI spec is written),
waits for the domain Ready (one IMEX domain of 18: every member connected to every
other), then lets every claim go and releases the domain. Round 0 warms up.

`--mode real` (the default where upstream's binaries are built, scripts/kube_build.sh):
upstream's control plane (testbed/kube/cluster.py: etcd, kube-apiserver, kube-scheduler, the
resourceclaim controller) and the kubelet's own DRA code on every Node (`kubelet-dra`,
testbed/kube/kubelet_dra.py), with its pod-worker backoff of 10-15 s after a failed
prepare. A round creates 18 bare pods naming the template, with no node selector:
the resourceclaim controller makes their claims, kube-scheduler allocates each a tray,
the tray's kubelet prepares it. Measured from the pod's creation to its kubelet's
"prepared" (both clocks the machine's), split at the moment the pod is bound.

`--racks N` (real mode): N racks of 18 trays, each its own NVLink clique (its Nodes
labelled `nvidia.com/gpu.clique` per rack), one numNodes 0 domain whose template selects
every clique, 18 pods per rack created at once, kube-scheduler alone placing them. Each round
checks that the pods landed in every clique and that each prepared tray is a member of its
own clique's ensemble (its daemon's peer names resolve to that clique's trays only), and
prints the CPU of each part of the set-up (the portal's web and worker, the agents with
their emulated daemons, the control plane, the kubelets).

`--mode stand-in`: the API mock (testbed/kube/kubemock.py), claims made and allocated by
testbed/kube/dra.py, and the Python kubelet stand-in (testbed/kube/kubelet.py) retrying a
prepare that answers "not ready" every 50 ms. Measured from allocation to prepared.

`--mode both` runs the two, one after the other, on two racks, and prints them side by side.

`--mode node`: real nodes, each a kubelet with containerd and runc (bench/dra_node.py):
pods created → containers running with their channel, `--nodes 1,3` one run per count.

    .venv/bin/python bench/dra.py [--rounds 5] [--mode real|stand-in|both|node] [--pods]
        [--racks N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, load_average, setup_django, stats, wait
from bench.formation import cpu_seconds

TRAYS = 18
DAEMON_LOG = "var/log/domain-portal/nvidia-imex.log"  # under each tray's root
# Trays at 127.<base>.<rack>.x, away from the tests and the other benchmarks: one rack per
# mode (a tray's agent re-joins only once its last one has been silent for a while).
FIRST_RACK = {"stand-in": 121, "real": 122}
NAMESPACE = "bench"


@dataclass
class Figures:
    """One mode's measurements over its rounds (seconds)."""

    per_claim: list[float] = field(default_factory=list)
    all_prepared: list[float] = field(default_factory=list)
    to_ready: list[float] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)
    counts: dict[str, list[Any]] = field(default_factory=dict)  # per round

    def add(self, name: str, values: list[float]) -> None:
        self.extra.setdefault(name, []).extend(values)

    def count(self, name: str, value: Any) -> None:
        self.counts.setdefault(name, []).append(value)


def usr1_processed(fleet: Any, hosts: list[str]) -> int:
    """SIGUSR1s the trays' daemons processed so far, from the emulated daemons' logs."""
    return sum(
        path.read_text(errors="replace").count("SIGUSR1: names re-resolved")
        for host in hosts
        if (path := fleet.tray_root(host) / DAEMON_LOG).exists()
    )


@dataclass
class Tenant:
    namespace: Any
    token: str


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", choices=("real", "stand-in", "both", "node"), default=None)
    parser.add_argument(
        "--nodes",
        default="1",
        help="--mode node: comma-separated node counts, one run each (e.g. 1,3)",
    )
    parser.add_argument(
        "--racks",
        type=int,
        default=1,
        help="--mode real: racks of 18 trays, each its own NVLink clique; 18 pods per rack",
    )
    parser.add_argument(
        "--pods",
        action="store_true",
        help="agents and IMEX runners in pods of their own, as the Helm chart runs them",
    )
    args = parser.parse_args()
    if args.racks < 1 or (args.racks > 1 and args.mode not in (None, "real")):
        parser.error("--racks: 1 or more, and more than 1 only with --mode real")

    setup_django(PORTAL_TESTING="1", LOG_LEVEL="WARNING")
    from domains.audit.events import SYSTEM
    from domains.tenancy.tokens import token_create
    from testbed import factories
    from testbed.kube.cluster import kube_binaries_built

    mode = args.mode or ("real" if kube_binaries_built() else "stand-in")
    if args.racks > 1 and mode != "real":
        parser.error("--racks: more than 1 needs upstream's binaries (scripts/kube_build.sh)")
    ns = factories.make_namespace(NAMESPACE)
    user = factories.make_user("bench")
    factories.add_member(user, ns, "member")
    _, raw = token_create(actor=SYSTEM, user=user, name="bench")
    tenant = Tenant(ns, raw)
    if mode == "node":
        from bench.dra_node import node_mode

        banner("DRA on real nodes: pods created → containers running with their channel")
        for count in (int(n) for n in args.nodes.split(",")):
            node_mode(tenant.namespace, tenant.token, args.rounds, count)
        print(f"# {load_average()}")
        print("\nGoal: the portal's and the agent's share of a pod's start ≤ 500 ms.")
        return 0
    pods_of = TRAYS * args.racks
    over = f" over {args.racks} racks" if args.racks > 1 else ""
    banner(f"DRA: {pods_of} claims prepared on {pods_of} trays{over}, numNodes 0 ({mode})")
    results: dict[str, Figures] = {}
    if mode in ("stand-in", "both"):
        results["stand-in"] = stand_in(tenant, args.rounds, pods=args.pods)
    if mode in ("real", "both"):
        results["real"] = real(tenant, args.rounds, pods=args.pods, racks=args.racks)
    print()
    for name, figures in results.items():
        start = "pod created" if name == "real" else "claim allocated"
        count = pods_of if name == "real" else TRAYS
        print(f"[{name:8}] {start} → all {count} prepared   {stats(figures.all_prepared)}")
    print(f"# {load_average()}")
    print(
        "\nTargets (docs/architecture.md): 18 claims allocated → all prepared under 2 s on "
        "the stand-ins; with kube-scheduler and the kubelet's own DRA code, 18 pods created → "
        "all prepared under 5 s; 72 pods over 4 racks under 8 s (median)."
    )
    return 0


def make_rack(mode: str, racks: int = 1) -> list[Any]:
    """The mode's trays: `racks` racks of 18, each its own clique, rack by rack."""
    from domains.inventory.models import Node
    from testbed import factories

    built = factories.make_racks(
        *[str(TRAYS)] * racks, ip_prefix=factories.tray_ip_prefix(), first_rack=FIRST_RACK[mode]
    )
    found = Node.objects.filter(rack__in=built).select_related("rack", "clique")
    return list(found.order_by("rack__name", "slot"))


def api_client(url: str, tenant: Tenant) -> Any:
    import httpx

    return httpx.Client(
        base_url=f"{url}/api/v1/namespaces/{NAMESPACE}",
        headers={"Authorization": f"Bearer {tenant.token}"},
        timeout=60,
    )


def phase_is(domain: Any, phase: str) -> bool:
    return bool(domain.__class__.objects.get(pk=domain.pk).phase == phase)


def join_spread(domain: Any) -> float:
    """Seconds from the domain's first member joining to its last (joins are taken one at
    a time, under the domain's lock)."""
    from django.db.models import Max, Min

    from domains.computedomains.models import DomainMember

    found = DomainMember.objects.filter(domain=domain).aggregate(
        first=Min("assigned_at"), last=Max("assigned_at")
    )
    return float((found["last"] - found["first"]).total_seconds())


def request_domain(api: Any, tenant: Tenant, name: str) -> Any:
    from domains.computedomains.models import ComputeDomain, Phase

    body = {"metadata": {"name": name}, "spec": {"numNodes": 0}}
    resp = api.post("/computedomains/", json=body)
    assert resp.status_code == 201, resp.text
    return ComputeDomain.objects.get(namespace=tenant.namespace, name=name, phase=Phase.ADMITTED)


def release_domain(api: Any, domain: Any) -> None:
    from domains.computedomains.models import Phase

    assert api.delete(f"/computedomains/{domain.name}/").status_code in (200, 202)
    wait(lambda: phase_is(domain, Phase.RELEASED), 120, "Released")


def print_figures(start: str, figures: Figures, trays: int = TRAYS) -> None:
    rows = (
        ("prepared, per claim", figures.per_claim),
        (f"all {trays} prepared", figures.all_prepared),
        (f"domain Ready ({trays})", figures.to_ready),
    )
    for what, values in rows:
        print(f"{start} → {what:21} {stats(values)}   (n={len(values)})")


# --- the stand-ins: the API mock, testbed/kube/dra.py, the Python kubelet -------------------
def stand_in(tenant: Tenant, rounds: int, *, pods: bool) -> Figures:
    from domains.computedomains.models import Phase
    from testbed.agents import AgentFleet
    from testbed.kube import kubemock
    from testbed.kube.dra import allocate, deallocate, published_slice
    from testbed.kube.kubelet import Kubelet
    from testbed.processes import running, start_server, start_worker

    print("\n## stand-ins: API mock, claims allocated by testbed/kube/dra.py, Python kubelet")
    nodes = make_rack("stand-in")
    hosts = [n.hostname for n in nodes]
    figures = Figures()
    with kubemock.running() as kube, tempfile.TemporaryDirectory(prefix="kl-") as tmp:
        kube.put_namespace(NAMESPACE)
        env = {"KUBECONFIG": str(kube.write_kubeconfig(Path(tmp) / "kubeconfig")),
               "PORTAL_KUBE_ENABLED": "1", "LOG_LEVEL": "WARNING"}  # fmt: skip
        server, url = start_server(**env)
        # INFO: start_worker waits for the worker's "ready." line, which WARNING hides.
        worker = start_worker("worker", concurrency=4, **{**env, "LOG_LEVEL": "INFO"})
        with (
            running(worker, server),
            api_client(url, tenant) as api,
            AgentFleet(
                url,
                nodes,
                poll_interval=10,
                heartbeat_interval=10,
                kubelet_dir=Path(tmp) / "k",
                kubeconfig=Path(env["KUBECONFIG"]),
                pods=pods,
            ) as fleet,
        ):
            fleet.wait_joined(timeout=120)
            for host in hosts:
                wait(lambda h=host: published_slice(kube, h), 60, "slices", 0.05)
            kubelets = {}
            for host in hosts:
                kubelets[host] = Kubelet(Path(tmp) / "k" / host)
                kubelets[host].register()
            print(f"# {TRAYS} agents joined, slices published, kubelets registered\n")
            procs = {
                "web": [(server.pid, False)],
                "worker": [(worker.pid, False)],
                "agents": [(fleet.proc.pid, False)],
                "IMEX daemons+ctl": [(fleet.proc.pid, True)],
            }
            cpu: dict[str, float] = dict.fromkeys(procs, 0.0)
            resolves: list[int] = []  # SIGUSR1s the daemons processed, per round
            for rnd in range(rounds + 1):
                before = {
                    k: sum(cpu_seconds(p, children=c) for p, c in v) for k, v in procs.items()
                }
                resolved_before = usr1_processed(fleet, hosts)
                domain = request_domain(api, tenant, f"wl-{rnd}")
                template = f"wl-{rnd}-channel"
                wait(lambda t=template: kube.get("resourceclaimtemplates", t, NAMESPACE), 30, "RCT")
                claims = {
                    host: allocate(
                        kube, namespace=NAMESPACE, template=template, pod=f"wl-{rnd}-{i}", node=host
                    )
                    for i, host in enumerate(hosts)
                }
                t0 = time.monotonic()

                def prepare(host: str, claims=claims, t0=t0) -> float:
                    result = kubelets[host].prepare_until_ready(
                        claims[host], timeout=60, interval=0.05
                    )
                    assert result["error"] == "", result["error"]
                    return time.monotonic() - t0

                with ThreadPoolExecutor(TRAYS) as pool:
                    took = list(pool.map(prepare, hosts))
                t_ready = wait(lambda d=domain: phase_is(d, Phase.READY), 120, "Ready")
                for host in hosts:
                    kubelets[host].unprepare(claims[host])
                    deallocate(kube, claims[host])
                release_domain(api, domain)
                if rnd == 0:
                    continue
                for k, v in procs.items():
                    cpu[k] += sum(cpu_seconds(p, children=c) for p, c in v) - before[k]
                figures.per_claim += took
                figures.all_prepared.append(max(took))
                figures.to_ready.append(t_ready - t0)
                figures.add("prepared → Ready", [t_ready - t0 - max(took)])
                figures.add("first join → last join", [join_spread(domain)])
                resolves.append(usr1_processed(fleet, hosts) - resolved_before)
            print_figures("allocated", figures)
            for what in ("prepared → Ready", "first join → last join"):
                print(f"{what:33} {stats(figures.extra[what])}")
            print(f"SIGUSR1s processed per round (18 daemons): {resolves}")
            print(
                "CPU per round (prepare, join, Ready, unprepare, release): "
                + ", ".join(f"{k} {v / max(rounds, 1):.2f} s" for k, v in cpu.items())
                + f"; total {sum(cpu.values()) / max(rounds, 1):.2f} s"
            )
            for kubelet in kubelets.values():
                kubelet.close()
    # Its cluster is gone: its trays with it (as the portal's Kubernetes sync marks the
    # trays of vanished Nodes), so no later domain keeps to their clique.
    nodes[0].__class__.objects.filter(pk__in=[n.pk for n in nodes]).update(gone=True)
    return figures


# --- upstream's control plane, kube-scheduler and the kubelet's own DRA code ----------------
class Bindings:
    """When each pod of the namespace was first seen bound to a Node (a watch, in a thread)."""

    def __init__(self, kube: Any) -> None:
        from kubernetes import client, watch

        self.core = client.CoreV1Api(kube.api)
        self.watch = watch.Watch()
        self.bound: dict[str, datetime] = {}
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped:
            try:
                for event in self.watch.stream(self.core.list_namespaced_pod, NAMESPACE):
                    pod = event["object"]
                    if pod.spec.node_name and pod.metadata.uid not in self.bound:
                        self.bound[pod.metadata.uid] = datetime.now(UTC)
            except Exception:  # the connection went (at the end: the API server stops)
                time.sleep(0.1)

    def stop(self) -> None:
        self.stopped = True
        self.watch.stop()


@dataclass
class Plane:
    """The cluster side of the real mode."""

    kube: Any  # testbed.kube.cluster.ClusterKube
    kubelets: Any  # testbed.kube.kubelet_dra.KubeletFleet
    bindings: Bindings
    pods: Any  # a CoreV1Api with a connection for each of the round's pods
    fleet: Any  # testbed.agents.AgentFleet
    nodes: list[Any]  # the trays (inventory Nodes), rack by rack
    racks: int

    @property
    def trays(self) -> int:
        return len(self.nodes)


def pods_api(kubeconfig: Path, connections: int) -> Any:
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = connections
    return client.CoreV1Api(client.ApiClient(cfg))


def create_pods(core: Any, rnd: int, template: str, count: int) -> dict[str, tuple[str, datetime]]:
    """The round's pods, POSTed side by side (as a controller, or `kubectl apply` of their
    manifests from several clients, would): uid → (name, just before its POST)."""

    from testbed.kube.objects import pod_with_claim

    def create(i: int) -> tuple[str, tuple[str, datetime]]:
        at = datetime.now(UTC)
        body = pod_with_claim(f"wl-{rnd}-{i}", NAMESPACE, template)
        made = core.create_namespaced_pod(NAMESPACE, body)
        return made.metadata.uid, (made.metadata.name, at)

    with ThreadPoolExecutor(min(count, 32)) as pool:
        return dict(pool.map(create, range(count)))


def all_free(kube: Any, trays: int) -> bool:
    """Every tray's slice says it serves no domain and may join one (the last round's
    release published): no pod of the round waits for a slice."""
    slices = kube.resource("resourceslices").get().to_dict()["items"]
    attributes = [d.get("attributes", {}) for s in slices for d in s["spec"].get("devices", [])]
    return len(attributes) == trays and all(
        a.get("domain") == {"string": ""} and a.get("eligible") == {"bool": True}
        for a in attributes
    )


def kubelet_events(kubelets: Any, kind: str, uids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """uid → its `kind` events from every Node's kubelet (each log read once), each with
    the Node's name under "node"."""
    found: dict[str, list[dict[str, Any]]] = {}
    for node, kubelet in kubelets.kubelets.items():
        for event in kubelet.events():
            if event["event"] == kind and event["uid"] in uids:
                found.setdefault(event["uid"], []).append({**event, "node": node})
    return found


# CPU by part of the set-up: the portal's processes (by pid), the rest by program name.
PROGRAMS = {
    "kube-apiserver": "apiserver",
    "etcd": "etcd",
    "kube-scheduler": "scheduler",
    "kube-controller": "controller",
    "kubelet-dra": "kubelets",
}


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(program, parent pid, CPU seconds of it and its reaped children)."""
    import os

    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])
    return comm, int(fields[1]), ticks / os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[str, int, float]]:
    import os

    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            found[int(entry)] = stat
    return found


def _root_below_us(pid: int, procs: dict[int, tuple[str, int, float]], roots: set[int]) -> int:
    """The first of `roots` on the way up from `pid` (itself included), this process's pid
    when none is, 0 when the process is not under this one."""
    import os

    at = pid
    while at in procs and at != os.getpid():
        if at in roots:
            return at
        at = procs[at][1]
    return at if at == os.getpid() else 0


def cpu_by_part(roots: dict[int, str]) -> dict[str, float]:
    """CPU seconds so far of every process under this one, by part: a process under one of
    `roots` (pid → part) counts to that part, with the children it reaped (the agent
    fleet's: its emulated IMEX daemons, which start and stop with a domain); the others by
    their program (PROGRAMS)."""
    procs = _processes()
    parts: dict[str, float] = {}
    for pid, (comm, _, cpu) in procs.items():
        root = _root_below_us(pid, procs, set(roots))
        if not root:
            continue  # not ours
        part = roots.get(root) or next(
            (v for k, v in PROGRAMS.items() if comm.startswith(k)), "other"
        )
        parts[part] = parts.get(part, 0.0) + cpu
    return parts


def rss_mib(program: str) -> int:
    """Resident memory of this process's descendants whose program starts with `program`."""
    procs = _processes()
    total = 0
    for pid, (comm, _, _) in procs.items():
        if not comm.startswith(program) or not _root_below_us(pid, procs, set()):
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next(
            (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")),
            0,
        )
    return total // 1024


def real(tenant: Tenant, rounds: int, *, pods: bool, racks: int = 1) -> Figures:
    from nodeagent.dra import DRIVER_NAME
    from nodeagent.dra.slices import slice_name
    from testbed.agents import AgentFleet
    from testbed.kube.cluster import ClusterKube, kube_binaries, running_cluster
    from testbed.kube.kubelet_dra import KubeletFleet
    from testbed.processes import running, start_server, start_worker

    print("\n## upstream: kube-apiserver, kube-scheduler, resourceclaim controller, kubelet-dra")
    nodes = make_rack("real", racks)
    trays = len(nodes)
    figures = Figures()
    with (
        tempfile.TemporaryDirectory(prefix="kd-") as tmp,  # unix sockets: 107 bytes
        running_cluster(Path(tempfile.mkdtemp(prefix="plane-", dir=tmp))) as cluster,
    ):
        kube = ClusterKube(cluster)
        prepare_cluster(kube, nodes)
        env = {"KUBECONFIG": str(cluster.kubeconfig), "PORTAL_KUBE_ENABLED": "1",
               "LOG_LEVEL": "WARNING"}  # fmt: skip
        server, url = start_server(**env)
        # INFO: start_worker waits for the worker's "ready." line, which WARNING hides.
        worker = start_worker("worker", concurrency=4, **{**env, "LOG_LEVEL": "INFO"})
        with (
            running(worker, server),
            api_client(url, tenant) as api,
            AgentFleet(
                url,
                nodes,
                poll_interval=10,
                heartbeat_interval=10,
                kubelet_dir=Path(tmp) / "k",
                kubeconfig=cluster.kubeconfig,
                pods=pods,
            ) as fleet,
            KubeletFleet(kube_binaries(), fleet, kubeconfig=cluster.kubeconfig) as kubelets,
        ):
            fleet.wait_joined(timeout=120 + 2 * trays)
            kubelets.wait_registered(DRIVER_NAME, timeout=60 + trays)
            for node in nodes:
                wait(
                    lambda h=node.hostname: kube.get("resourceslices", slice_name(h)), 60, "slices"
                )
            print(f"# {trays} agents joined, slices published, plugins registered")
            print(f"# memory: {memory_line()}\n")
            bindings = Bindings(kube)
            plane = Plane(
                kube, kubelets, bindings, pods_api(cluster.kubeconfig, 32), fleet, nodes, racks
            )
            roots = {server.pid: "web", worker.pid: "worker"}
            if fleet.proc is not None:
                roots[fleet.proc.pid] = "agents+IMEX emulator"
            hosts = [n.hostname for n in nodes]
            try:
                for rnd in range(rounds + 1):
                    resolved_before = usr1_processed(fleet, hosts)
                    cpu_before = cpu_by_part(roots)
                    real_round(api, tenant, plane, rnd, figures)
                    if rnd:
                        figures.count("usr1", usr1_processed(fleet, hosts) - resolved_before)
                        for part, cpu in cpu_by_part(roots).items():
                            figures.add(f"cpu {part}", [cpu - cpu_before.get(part, 0.0)])
                        figures.add("load", [float(load_average_1())])
            finally:
                bindings.stop()
            print(f"# memory at the end: {memory_line()}")
            print_real(figures, trays, racks)
    return figures


def prepare_cluster(kube: Any, nodes: list[Any]) -> None:
    """The CRD, the DeviceClass, the namespace, and a Node per tray labelled with its rack
    and its rack's clique."""
    import yaml

    from testbed.kube.chartobjects import install_device_class
    from testbed.kube.objects import gpu_labels
    from testbed.kube.schemas import CRD_PATH

    kube.apply(yaml.safe_load(CRD_PATH.read_text()))
    kube.wait_established("computedomains.resource.nvidia.com")
    install_device_class(kube)
    kube.put_namespace(NAMESPACE)
    for node in nodes:
        labels = gpu_labels(rack=node.rack.name, **{"nvidia.com/gpu.clique": node.clique.label})
        kube.put_node(node.hostname, labels, ip=node.management_ip or "")


def load_average_1() -> float:
    import os

    return os.getloadavg()[0]


def memory_line() -> str:
    lines = Path("/proc/meminfo").read_text().splitlines()
    info = {line.split(":")[0]: int(line.split()[1]) // 1024 for line in lines if ":" in line}
    return (
        f"available {info['MemAvailable'] / 1024:.1f} GiB of {info['MemTotal'] / 1024:.1f}; "
        f"kubelet-dra {rss_mib('kubelet-dra')} MiB, kube-apiserver {rss_mib('kube-apiserver')} "
        f"MiB, etcd {rss_mib('etcd')} MiB"
    )


def print_real(figures: Figures, trays: int, racks: int) -> None:
    print_figures("pod created", figures, trays)
    for what in (
        f"{trays} pods created (the bench's POSTs)",
        "created → bound",
        "first created → last bound",
        "bound → prepared",
        "last bound → all prepared",
        "first join → last join",
        "all prepared → Ready",
    ):
        print(f"{what:36} {stats(figures.extra[what])}")
    print(
        "failed prepares (each a kubelet backoff of 10-15 s), per round: "
        f"{figures.counts['failed']}"
    )
    print(f"SIGUSR1s processed per round ({trays} daemons): {figures.counts['usr1']}")
    print(f"pods per clique, per round ({racks} cliques): {figures.counts['spread']}")
    parts = sorted(k for k in figures.extra if k.startswith("cpu "))
    rounds = max(len(figures.all_prepared), 1)
    print(
        "CPU per round (pods made, prepared, Ready, deleted, unprepared, released): "
        + ", ".join(f"{k[4:]} {sum(figures.extra[k]) / rounds:.2f} s" for k in parts)
        + f"; total {sum(sum(figures.extra[k]) for k in parts) / rounds:.2f} s"
    )
    print(f"load average (1 min) after each round: {figures.extra['load']}")


def check_ensembles(plane: Plane, domain: Any, prepared: dict[str, str]) -> dict[str, int]:
    """Every prepared tray is an active member of its own clique's ensemble, indexed in its
    clique, its nodes file on disk listing its clique's members and no other; the pods
    landed in every clique. Returns pods per clique label."""
    from domains.computedomains.models import DomainMember
    from nodeagent.imex.files import render_names, slot_name

    members = DomainMember.objects.filter(domain=domain, active=True).select_related(
        "node", "clique"
    )
    by_host = {m.node.hostname: m for m in members}
    cliques = {n.hostname: n.clique for n in plane.nodes}
    per_clique: dict[str, list[Any]] = {}
    for m in members:
        per_clique.setdefault(m.clique.label, []).append(m)
    for host in prepared.values():
        m = by_host.get(host)
        assert m is not None, f"{host}: prepared, not a member"
        assert m.clique_id == cliques[host].pk, f"{host}: in another clique's ensemble"
    token = domain.__class__.objects.get(pk=domain.pk).imex_name_token
    for label, ensemble in per_clique.items():
        ensemble.sort(key=lambda m: m.index)
        assert [m.index for m in ensemble] == list(range(len(ensemble))), label
        expected = {slot_name(m.index, token): m.ip_address for m in ensemble}
        for m in ensemble:
            host = m.node.hostname
            assert plane.fleet.nodes_file(host) == render_names(token), host
            assert peers_named(plane, host) == expected, f"{host}: peers of another clique"
    landed = {cliques[host].label for host in prepared.values()}
    assert len(landed) == plane.racks, f"pods in {len(landed)} of {plane.racks} cliques"
    return {label: len(ensemble) for label, ensemble in sorted(per_clique.items())}


def peers_named(plane: Plane, host: str) -> dict[str, str]:
    """The peer names the tray's daemon resolves that point at a tray (name → IP), from the
    hosts file it reads (its runner pod's with `--pods`)."""
    from nodeagent.config import Paths
    from nodeagent.imex.files import SLOT_PREFIX, UNUSED_SLOT_IP

    fleet = plane.fleet
    path = fleet.pod_hosts(f"runner-{host}") if fleet.pods else Paths(fleet.tray_root(host)).hosts
    lines = [line.split() for line in path.read_text().splitlines()]
    return {
        f[1]: f[0]
        for f in lines
        if len(f) == 2 and f[1].startswith(SLOT_PREFIX) and f[0] != UNUSED_SLOT_IP
    }


def real_round(api: Any, tenant: Tenant, plane: Plane, rnd: int, figures: Figures) -> None:
    """One round: a pod per tray created, all prepared, the domain Ready; pods deleted,
    claims unprepared, the domain released. Round 0 adds no figures."""
    from domains.computedomains.models import Phase

    kube, kubelets, core, trays = plane.kube, plane.kubelets, plane.pods, plane.trays
    domain = request_domain(api, tenant, f"wl-{rnd}")
    template = f"wl-{rnd}-channel"
    wait(lambda: kube.get("resourceclaimtemplates", template, NAMESPACE), 30, "RCT", 0.05)
    wait(lambda: all_free(kube, trays), 60, "every slice free and eligible", 0.05)
    t0 = time.monotonic()
    made = create_pods(core, rnd, template, trays)
    created = {uid: at for uid, (_, at) in made.items()}
    uids = set(created)
    spread = (datetime.now(UTC) - min(created.values())).total_seconds()

    done: dict[str, list[dict[str, Any]]] = {}

    def all_prepared() -> bool:
        done.update(kubelet_events(kubelets, "prepared", uids))
        return len(done) == trays

    wait(all_prepared, 120 + trays, "all prepared", 0.1)
    t_ready = wait(lambda: phase_is(domain, Phase.READY), 120, "Ready")
    spread_by_clique = check_ensembles(plane, domain, {u: e[0]["node"] for u, e in done.items()})
    failed = sum(len(v) for v in kubelet_events(kubelets, "prepareFailed", uids).values())
    tear_down(plane, domain, api, {uid: name for uid, (name, _) in made.items()})
    if rnd == 0:
        return
    figures.count("failed", failed)
    figures.count("spread", list(spread_by_clique.values()))
    figures.add(f"{trays} pods created (the bench's POSTs)", [spread])
    figures.add("first join → last join", [join_spread(domain)])
    add_times(figures, plane.bindings, created, done, t_ready - t0)


def tear_down(plane: Plane, domain: Any, api: Any, names: dict[str, str]) -> None:
    """The round's pods deleted, their claims unprepared and deallocated, the domain
    released."""
    from kubernetes import client

    kube, kubelets, core = plane.kube, plane.kubelets, plane.pods
    for name in names.values():
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    uids = set(names)
    wait(
        lambda: len(kubelet_events(kubelets, "unprepared", uids)) == len(uids),
        60 + len(uids),
        "unprepared",
        0.1,
    )
    wait(lambda: not core.list_namespaced_pod(NAMESPACE).items, 60, "pods gone", 0.1)
    # The resourceclaim controller deallocates the claims of pods that are gone; deleting
    # them is the garbage collector's work, which this control plane does not run.
    resource = client.ResourceV1Api(kube.api)

    def deallocated() -> bool:
        claims = resource.list_namespaced_resource_claim(NAMESPACE).items
        return all(c.status is None or c.status.allocation is None for c in claims)

    wait(deallocated, 60, "claims deallocated", 0.1)
    resource.delete_collection_namespaced_resource_claim(NAMESPACE)
    release_domain(api, domain)


def add_times(
    figures: Figures,
    bindings: Bindings,
    created: dict[str, datetime],
    done: dict[str, list[dict[str, Any]]],
    to_ready: float,
) -> None:
    took = {}
    prepared_at = {uid: datetime.fromisoformat(events[0]["time"]) for uid, events in done.items()}
    for uid, at in prepared_at.items():
        took[uid] = (at - created[uid]).total_seconds()
        bound = bindings.bound.get(uid)
        if bound is not None:
            figures.add("created → bound", [(bound - created[uid]).total_seconds()])
            figures.add("bound → prepared", [(at - bound).total_seconds()])
    first = min(created.values())
    last = max(prepared_at.values())
    if all(uid in bindings.bound for uid in created):
        last_bound = max(bindings.bound[uid] for uid in created)
        figures.add("first created → last bound", [(last_bound - first).total_seconds()])
        figures.add("last bound → all prepared", [(last - last_bound).total_seconds()])
    figures.per_claim += list(took.values())
    all_prepared = (last - first).total_seconds()
    figures.all_prepared.append(all_prepared)
    figures.to_ready.append(to_ready)
    figures.add("all prepared → Ready", [to_ready - all_prepared])


if __name__ == "__main__":
    raise SystemExit(main())
