"""DRA on real nodes (`bench/dra.py --mode node`): pods created → containers running with
their channel, on real kubelets with containerd and runc (testbed/kube/node.py).

Each tray is a real node on upstream's control plane, its agent and IMEX runner pods as
the chart runs them; the server and a Celery worker are real, PostgreSQL and Redis too.
A round requests a ComputeDomain of as many trays as there are nodes (Single mode), waits
for it Ready, creates one pod per node holding a claim from its template (no node
selector: kube-scheduler spreads them, one device per tray), and measures each pod from
its creation to its container seen running (the API polled every 50 ms) and its channel
listed by the container; then deletes the pods, waits for their claims gone, releases the
domain. Round 0 warms up.

The portal's and the agent's share of a pod's start is what the kubelet spends in the
agent's NodePrepareResources (the agent asks the portal there): the kubelet's own
`dra_grpc_operations_duration_seconds` histogram, its sum over its count per round.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import stats, wait

PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
FIRST_RACK = 123


def prepare_calls(metrics: str) -> tuple[float, int]:
    """(seconds, calls) of NodePrepareResources so far, from a kubelet's /metrics."""
    total, count = 0.0, 0
    for line in metrics.splitlines():
        if "dra_grpc_operations_duration_seconds_" not in line or PREPARE not in line:
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith("dra_grpc_operations_duration_seconds_sum"):
            total += float(value)
        elif name.startswith("dra_grpc_operations_duration_seconds_count"):
            count += int(float(value))
    return total, count


NAMESPACE = "bench"


def node_mode(namespace: Any, token: str, rounds: int, nodes: int) -> dict[str, list[float]]:
    import httpx
    import yaml

    from domains.inventory.models import Node
    from testbed import factories
    from testbed.kube.chartobjects import install_device_class
    from testbed.kube.cluster import ClusterKube, running_cluster
    from testbed.kube.nodeworld import trays_on_real_nodes
    from testbed.kube.schemas import CRD_PATH
    from testbed.processes import running, start_server, start_worker

    (rack,) = factories.make_racks(
        str(nodes), ip_prefix=f"10.{factories.TRAY_IP_BASE}", first_rack=FIRST_RACK
    )
    trays = list(Node.objects.filter(rack=rack).order_by("slot"))
    print(f"\n## real nodes: {nodes} x (kubelet, containerd, runc), agent and runner pods")
    figures: dict[str, list[float]] = {"start": [], "share": [], "calls": []}
    with running_cluster(Path(tempfile.mkdtemp(prefix="plane-"))) as cluster:
        kube = ClusterKube(cluster)
        kube.apply(yaml.safe_load(CRD_PATH.read_text()))
        kube.wait_established("computedomains.resource.nvidia.com")
        install_device_class(kube)
        kube.put_namespace(NAMESPACE)
        env = {"KUBECONFIG": str(cluster.kubeconfig), "PORTAL_KUBE_ENABLED": "1",
               "LOG_LEVEL": "WARNING"}  # fmt: skip
        server, url = start_server(**env)
        # INFO: start_worker waits for the worker's "ready." line, which WARNING hides.
        worker = start_worker("worker", concurrency=2, **{**env, "LOG_LEVEL": "INFO"})
        with (
            running(worker, server),
            httpx.Client(
                base_url=f"{url}/api/v1/namespaces/{NAMESPACE}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            ) as api,
            trays_on_real_nodes(url, kube, trays, NAMESPACE) as world,
        ):
            print(f"# {nodes} nodes Ready, agents joined, slices published\n")
            for rnd in range(rounds + 1):
                node_round(api, world, rnd, nodes, figures)
    print(f"pod created → container running with its channel   {stats(figures['start'])}"
          f"   (n={len(figures['start'])})")  # fmt: skip
    print(f"NodePrepareResources, mean per round (kubelet)      {stats(figures['share'])}")
    return figures


def node_round(api: Any, world: Any, rnd: int, nodes: int, figures: dict[str, list[float]]) -> None:
    from domains.computedomains.models import ComputeDomain, Phase

    name = f"n{nodes}-r{rnd}"
    body = {"metadata": {"name": name}, "spec": {"numNodes": nodes}}
    resp = api.post("/computedomains/", json=body)
    assert resp.status_code == 201, resp.text
    live = (Phase.ADMITTED, Phase.FORMING, Phase.READY)
    domain = ComputeDomain.objects.get(namespace__name=world.namespace, name=name, phase__in=live)
    wait(lambda: phase_of(domain) == Phase.READY, 120, "domain Ready")
    template = f"{name}-channel"
    wait(lambda: world.kube.get("resourceclaimtemplates", template, world.namespace), 30,
         "template")  # fmt: skip
    before = [world.nodes[n].kubelet_metrics() for n in world.nodes.nodes]
    pods = [f"{name}-p{i}" for i in range(nodes)]
    created = {}
    for pod in pods:
        created[pod] = time.monotonic()
        world.run_pod(pod, template)
    started: dict[str, float] = {}

    def all_started() -> bool:
        for pod in pods:
            if pod in started:
                continue
            status = world.pod(pod).get("status") or {}
            states = [s.get("state") or {} for s in status.get("containerStatuses") or []]
            if states and all("running" in s for s in states):
                started[pod] = time.monotonic()
        return len(started) == len(pods)

    wait(all_started, 180, "containers running")
    for pod in pods:
        assert world.listing(pod).count == 1
    after = [world.nodes[n].kubelet_metrics() for n in world.nodes.nodes]
    if rnd:
        figures["start"] += [started[p] - created[p] for p in pods]
        spent = [
            prepare_calls(a)[0] - prepare_calls(b)[0] for a, b in zip(after, before, strict=True)
        ]
        calls = [
            prepare_calls(a)[1] - prepare_calls(b)[1] for a, b in zip(after, before, strict=True)
        ]
        figures["share"].append(sum(spent) / max(1, sum(calls)))
        figures["calls"].append(float(sum(calls)))
    for pod in pods:
        world.kube.resource("pods").delete(name=pod, namespace=world.namespace)
    wait(lambda: all(world.kube.get("pods", p, world.namespace) is None for p in pods), 120,
         "pods gone")  # fmt: skip
    wait(lambda: not world.kube.resource("resourceclaims").get(namespace=world.namespace).items,
         120, "claims gone")  # fmt: skip
    assert api.delete(f"/computedomains/{name}/").status_code in (200, 202)
    wait(lambda: phase_of(domain) == Phase.RELEASED, 120, "Released")


def phase_of(domain: Any) -> str:
    return str(domain.__class__.objects.get(pk=domain.pk).phase)
