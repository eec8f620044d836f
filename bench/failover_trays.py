"""`bench/failover.py --trays`: a tray of a Ready placed domain killed → its replacement Ready.

Everything real except the hardware: the ASGI server, a Celery worker and beat, PostgreSQL
(BENCH_DATABASE_URL), Redis, one agent fleet process running every tray's reconcile loop,
each tray with its own emulated `nvidia-imex` on its own loopback IP.

Each round requests a domain of `--size` trays on one rack (18 trays, so free trays are
left), waits until it is Ready, then kills one of its trays with the demo's tray control
(`testbed.emulator.trayctl kill`: its agent stops as a crash leaves it, its daemon is
killed and held), timed from the moment its daemon is gone. Nobody marks it down: the
controller finds the tray's agent silent past PORTAL_FAILOVER_GRACE_S (`--grace`), picks a
free tray of the clique, and the new tray forms in. Printed per round and as medians:

  replaced   killed → the `domain.member_replaced` event (detection: the grace, counted
             from the tray's last heartbeat, plus the reconcile pass that notices)
  formed     replaced → the new member's ready report folded, and the domain Ready again
             (the survivors' daemons start again to read the new peer list)
  total      killed → the domain Ready again; total - grace is what the goal (< 3 s) is about

The tray is then revived, the domain released, and the next round kills another tray.

    .venv/bin/python bench/failover.py --trays [--rounds 5] [--size 4] [--grace 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, setup_django, wait

FIRST_RACK = 70  # its own rack numbers and addresses, apart from other benchmarks'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/failover.py --trays", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=4, help="trays of the domain")
    parser.add_argument("--grace", type=int, default=5, help="PORTAL_FAILOVER_GRACE_S")
    args = parser.parse_args(argv)
    timing = {
        "PORTAL_HEARTBEAT_INTERVAL_S": "1",
        "PORTAL_HEARTBEAT_STALE_S": str(max(2, args.grace // 2)),
        "PORTAL_FAILOVER_GRACE_S": str(args.grace),
        "PORTAL_RECONCILE_SECONDS": "0.5",
        "PORTAL_REAP_SECONDS": "0.5",
        "LOG_LEVEL": "WARNING",
    }
    setup_django(PORTAL_TESTING="1", **timing)
    import httpx

    from domains.audit.events import SYSTEM
    from domains.tenancy.tokens import token_create
    from testbed import factories
    from testbed.agents import AgentFleet
    from testbed.processes import running, start_beat, start_server, start_worker

    (rack,) = factories.make_racks(
        "18", ip_prefix=factories.tray_ip_prefix(), first_rack=FIRST_RACK
    )
    ns = factories.make_namespace("bench", max_nodes=18, max_gpus=72)
    user = factories.make_user("bench")
    factories.add_member(user, ns, "member")
    _, raw = token_create(actor=SYSTEM, user=user, name="bench")

    banner("Failover on the emulator: a tray killed → its replacement Ready")
    print(
        f"# 1 rack x 18 trays; a {args.size}-tray domain; failover grace {args.grace} s, "
        "heartbeats every 1 s, reconcile every 0.5 s; 1 web, 1 Celery worker (4 threads), beat"
    )
    server, url = start_server(**timing)
    worker = start_worker("worker", concurrency=4, **timing)
    beat = start_beat(**timing)
    api = httpx.Client(
        base_url=f"{url}/api/v1/namespaces/bench",
        headers={"Authorization": f"Bearer {raw}"},
        timeout=60,
        limits=httpx.Limits(keepalive_expiry=2.0),
    )
    trays = rack.nodes.order_by("pk")
    rows = []
    with (
        running(beat, worker, server),
        AgentFleet(url, trays, poll_interval=1, heartbeat_interval=1) as fleet,
    ):
        fleet.wait_joined(timeout=300)
        print(f"\n{'round':>5}  {'victim':<12} {'replaced by':<12} {'replaced':>9} "
              f"{'formed':>8} {'total':>8} {'beyond':>8}")  # fmt: skip
        for i in range(args.rounds):
            row = one_round(api, fleet, f"fo-{i}", args.size, i)
            rows.append(row)
            row["beyond"] -= args.grace
            print(
                f"{i + 1:>5}  {row['victim']:<12} {row['new']:<12} {row['replaced']:>8.2f}s "
                f"{row['formed']:>7.2f}s {row['total']:>7.2f}s {row['beyond']:>7.2f}s"
            )
    print()
    for key in ("replaced", "formed", "total", "beyond"):
        print(f"median {key:<9} {statistics.median(r[key] for r in rows):6.2f} s")
    print(f"goal: beyond the {args.grace} s grace, < 3 s")
    return 0


def one_round(api, fleet, name: str, size: int, turn: int) -> dict:
    from domains.audit.models import Event
    from domains.computedomains.models import LIVE_PHASES, ComputeDomain, DomainMember, Phase
    from domains.inventory.models import Node

    resp = api.post(
        "/computedomains/", json={"metadata": {"name": name}, "spec": {"numNodes": size}}
    )
    assert resp.status_code == 201, resp.text
    domain = ComputeDomain.objects.get(namespace__name="bench", name=name, phase__in=LIVE_PHASES)

    def phase() -> str:
        domain.refresh_from_db(fields=["phase"])
        return domain.phase

    wait(lambda: phase() == Phase.READY, 120, f"{name} Ready", interval=0.05)
    members = list(
        DomainMember.objects.filter(domain=domain, active=True)
        .select_related("node")
        .order_by("index")
    )
    victim = members[turn % len(members)]
    host = victim.node.hostname
    fleet.control(host, "kill")
    wait(lambda: fleet.daemon_pid(host) is None, 30, f"{host}'s daemon gone", interval=0.01)
    killed = time.time()
    heard = _epoch(Node.objects.get(hostname=host).last_heartbeat)
    wait(lambda: Event.objects.filter(domain=domain, verb="domain.member_replaced").exists(),
         120, "the replacement")  # fmt: skip
    replaced = Event.objects.get(domain=domain, verb="domain.member_replaced")
    wait(lambda: phase() == Phase.READY, 120, f"{name} Ready again", interval=0.01)
    new = DomainMember.objects.get(domain=domain, active=True, index=victim.index)
    again = _ready_again(domain)
    row = {
        "victim": host,
        "new": new.node.hostname,
        "replaced": _epoch(replaced.created_at) - killed,
        "formed": again - _epoch(replaced.created_at),
        "total": again - killed,
        "beyond": again - heard,  # less the grace, by the caller
    }
    fleet.control(host, "revive")
    assert api.delete(f"/computedomains/{name}/").status_code in (200, 202)
    wait(lambda: phase() == Phase.RELEASED, 120, f"{name} Released", interval=0.05)
    wait(lambda: fleet.leftovers(host) == [], 60, f"{host} clean", interval=0.1)
    return row


def _ready_again(domain) -> float:
    """When the domain turned Ready after the replacement (its `domain.recovered` event)."""
    from domains.audit.models import Event

    back = Event.objects.filter(domain=domain, verb="domain.recovered").order_by("-id").first()
    assert back is not None, "the domain never recovered"
    return _epoch(back.created_at)


def _epoch(at: datetime) -> float:
    return at.timestamp()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
