"""DRA: a ResourceClaim allocated → the node agent's NodePrepareResources succeeds, for a
domain that follows its workload (numNodes 0), 18 pods on 18 trays at once.

Everything real except the hardware and the cluster around the portal: the ASGI server, a
Celery worker (publishing the ComputeDomain and its ResourceClaimTemplate), PostgreSQL
(BENCH_DATABASE_URL), Redis, and one agent fleet whose agents are DRA kubelet plugins on
emulated trays. The Kubernetes API is `tests/support/kubemock.py`; the control plane and
the scheduler are played by `tests/support/dra.py` (claims made from the template and
allocated to each tray's published device), the kubelet by `tests/support/kubelet.py` (the
real gRPC contract over unix sockets), retrying a prepare that answers "not ready" every
50 ms, as fast as a kubelet would.

Each round: request a numNodes 0 domain over the REST API, allocate 18 claims (one per
tray), prepare all 18 concurrently. Per claim: allocated → prepare succeeded (the tray
joined the domain, its IMEX daemon is READY, the channel exists, the CDI spec is written).
Also: allocated → the last of the 18 prepared, and → the domain Ready (one IMEX domain of
18: every member connected to every other). Then every claim is unprepared and the domain
released. Round 0 warms up.

    .venv/bin/python bench/dra.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, load_average, setup_django, stats, wait
from bench.formation import cpu_seconds

TRAYS = 18
DAEMON_LOG = "var/log/domain-portal/nvidia-imex.log"  # under each tray's root
FIRST_RACK = 121  # trays at 127.<base>.121.x, away from the tests and the other benchmarks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    setup_django(PORTAL_TESTING="1", LOG_LEVEL="WARNING")
    import httpx

    from domains.audit.events import SYSTEM
    from domains.computedomains.models import ComputeDomain, Phase
    from domains.inventory.models import Node
    from domains.tenancy.tokens import token_create
    from tests import factories
    from tests.support import kubemock
    from tests.support.agents import AgentFleet
    from tests.support.dra import allocate, deallocate, published_slice
    from tests.support.kubelet import Kubelet
    from tests.support.processes import running, start_server, start_worker

    (rack,) = factories.make_racks(
        "18", ip_prefix=factories.tray_ip_prefix(), first_rack=FIRST_RACK
    )
    ns = factories.make_namespace("bench")
    user = factories.make_user("bench")
    factories.add_member(user, ns, "member")
    _, raw = token_create(actor=SYSTEM, user=user, name="bench")
    banner("DRA: claim allocated → NodePrepareResources succeeds (numNodes 0, 18 trays)")

    with kubemock.running() as kube, tempfile.TemporaryDirectory(prefix="kl-") as tmp:
        kube.put_namespace("bench")
        env = {"KUBECONFIG": str(kube.write_kubeconfig(Path(tmp) / "kubeconfig")),
               "PORTAL_KUBE_ENABLED": "1", "LOG_LEVEL": "WARNING"}  # fmt: skip
        server, url = start_server(**env)
        worker = start_worker("worker", concurrency=4, **env)
        api = httpx.Client(
            base_url=f"{url}/api/v1/namespaces/bench",
            headers={"Authorization": f"Bearer {raw}"},
            timeout=60,
        )
        nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
        hosts = [n.hostname for n in nodes]
        with (
            running(worker, server),
            AgentFleet(
                url,
                nodes,
                poll_interval=10,
                heartbeat_interval=10,
                kubelet_dir=Path(tmp) / "k",
                kubeconfig=Path(env["KUBECONFIG"]),
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
            per_claim, all_prepared, to_ready, prepared_to_ready = [], [], [], []
            procs = {
                "web": [(server.pid, False)],
                "worker": [(worker.pid, False)],
                "agents": [(fleet.proc.pid, False)],
                "IMEX daemons+ctl": [(fleet.proc.pid, True)],
            }
            cpu: dict[str, float] = dict.fromkeys(procs, 0.0)
            resolves: list[int] = []  # SIGUSR1s the daemons processed, per round

            def processed() -> int:
                """SIGUSR1s processed so far, from the emulated daemons' logs."""
                return sum(
                    path.read_text(errors="replace").count("SIGUSR1: names re-resolved")
                    for host in hosts
                    if (path := fleet.tray_root(host) / DAEMON_LOG).exists()
                )

            for rnd in range(args.rounds + 1):
                before = {
                    k: sum(cpu_seconds(p, children=c) for p, c in v) for k, v in procs.items()
                }
                resolved_before = processed()
                name = f"wl-{rnd}"
                body = {"metadata": {"name": name}, "spec": {"numNodes": 0}}
                assert api.post("/computedomains/", json=body).status_code == 201
                domain = ComputeDomain.objects.get(namespace=ns, name=name, phase=Phase.ADMITTED)
                template = f"{name}-channel"
                wait(lambda t=template: kube.get("resourceclaimtemplates", t, "bench"), 30, "RCT")
                claims = {
                    host: allocate(
                        kube, namespace="bench", template=template, pod=f"{name}-{i}", node=host
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
                t_ready = wait(
                    lambda d=domain: d.__class__.objects.get(pk=d.pk).phase == Phase.READY,
                    120,
                    "Ready",
                )
                for host in hosts:
                    kubelets[host].unprepare(claims[host])
                    deallocate(kube, claims[host])
                assert api.delete(f"/computedomains/{name}/").status_code in (200, 202)
                wait(
                    lambda d=domain: d.__class__.objects.get(pk=d.pk).phase == Phase.RELEASED,
                    120,
                    "Released",
                )
                if rnd == 0:
                    continue
                for k, v in procs.items():
                    cpu[k] += sum(cpu_seconds(p, children=c) for p, c in v) - before[k]
                per_claim += took
                all_prepared.append(max(took))
                to_ready.append(t_ready - t0)
                prepared_to_ready.append(t_ready - t0 - max(took))
                resolves.append(processed() - resolved_before)
            print(f"allocated → prepared, per claim   {stats(per_claim)}   (n={len(per_claim)})")
            print(
                f"allocated → all 18 prepared       {stats(all_prepared)}   (n={len(all_prepared)})"
            )
            print(f"allocated → domain Ready (18)     {stats(to_ready)}   (n={len(to_ready)})")
            print(
                f"all 18 prepared → domain Ready     {stats(prepared_to_ready)}   "
                f"(n={len(prepared_to_ready)})"
            )
            print(f"SIGUSR1s processed per round (18 daemons): {resolves}")
            rounds = max(args.rounds, 1)
            print(
                "CPU per round (prepare, join, Ready, unprepare, release): "
                + ", ".join(f"{k} {v / rounds:.2f} s" for k, v in cpu.items())
                + f"; total {sum(cpu.values()) / rounds:.2f} s"
            )
            print(f"# {load_average()}")
            for kubelet in kubelets.values():
                kubelet.close()
    print(
        "\nTargets (docs/architecture.md): 18 claims allocated → all prepared under 2 s; "
        "18 claims prepared → all Ready under 2 s."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
