"""Soak with faults: request → Ready → release cycles from two tenants over the REST API
while faults are injected at random, then an audit of what was left behind.

Everything is real: uvicorn, a Celery worker and beat, a private redis-server (so restarting
it disturbs nobody else), PostgreSQL, and one agent process hosting every emulated tray of
two NVL72 racks, each tray with its own emulated nvidia-imex process. Faults:

- worker:  kill -9 the Celery worker, start a new one
- redis:   SHUTDOWN NOSAVE the broker/channel layer, start it again a second later
- agents:  kill -9 the agent process (daemons live on), start it again
- daemon:  kill -9 one running nvidia-imex

At the end: every domain must be Ready or Released, no member, channel, daemon, config or
device left on a tray that no live domain holds, and the event log must show each fault's
trace. Prints cycles, faults injected, faults survived, anything lost.

    .venv/bin/python bench/soak.py [--cycles 200] [--fault-every 4] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, setup_django

WAIT_S = 180


@dataclass
class Tally:
    cycles: int = 0
    failed_cycles: list[str] = field(default_factory=list)
    faults: list[tuple[float, str, str]] = field(default_factory=list)  # (t, kind, target)
    lock: threading.Lock = field(default_factory=threading.Lock)


class PrivateRedis:
    def __init__(self, port: int, workdir: Path) -> None:
        self.port, self.workdir, self.proc = port, workdir, None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        for _ in range(100):
            try:
                redis.Redis(port=self.port).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGKILL)  # an abrupt loss, like a crashed broker
            self.proc.wait(10)


def tenant_loop(name: str, url: str, ns: str, token: str, tally: Tally, target: int) -> None:
    import httpx

    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    rng = random.Random(name)
    n = 0
    while True:
        with tally.lock:
            if tally.cycles + len(tally.failed_cycles) >= target:
                return
        n += 1
        dname = f"{name}-soak-{n}"
        body = {"metadata": {"name": dname}, "spec": {"numNodes": rng.choice([1, 2, 3, 4])}}
        outcome = run_cycle(client, ns, dname, body)
        with tally.lock:
            if outcome == "ok":
                tally.cycles += 1
            else:
                tally.failed_cycles.append(f"{ns}/{dname}: {outcome}")


def call(client, method: str, path: str, **kw):
    """One API call, retried while the web tier is briefly unavailable (Redis restart)."""
    import httpx

    for _ in range(50):
        try:
            resp = client.request(method, path, **kw)
            if resp.status_code < 500:
                return resp
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{method} {path} kept failing")


def wait_phase(client, path: str, phases: set[str]) -> str:
    deadline = time.monotonic() + WAIT_S
    phase = "?"
    while time.monotonic() < deadline:
        phase = call(client, "GET", path).json()["status"]["phase"]
        if phase in phases:
            return phase
        time.sleep(0.1)
    return f"stuck in {phase}"


def run_cycle(client, ns: str, name: str, body: dict) -> str:
    base = f"/api/v1/namespaces/{ns}/computedomains"
    resp = call(client, "POST", f"{base}/", json=body)
    if resp.status_code == 422:  # no capacity right now (the other tenant holds it): retry
        time.sleep(0.5)
        return run_cycle(client, ns, name, body)
    if resp.status_code != 201:
        return f"create answered {resp.status_code}: {resp.text[:200]}"
    phase = wait_phase(client, f"{base}/{name}", {"Ready", "Failed"})
    if phase != "Ready":
        return f"never Ready ({phase})"
    call(client, "DELETE", f"{base}/{name}")
    phase = wait_phase(client, f"{base}/{name}", {"Released"})
    return "ok" if phase == "Released" else f"never Released ({phase})"


def fault_loop(ctx: dict, tally: Tally, every: float, stop: threading.Event, seed: int) -> None:
    from tests.support.processes import start_worker

    rng = random.Random(seed)
    start = time.monotonic()
    while not stop.wait(rng.uniform(every * 0.5, every * 1.5)):
        kind = rng.choice(["worker", "redis", "agents", "daemon", "daemon"])
        target = ""
        if kind == "worker":
            ctx["worker"].kill(signal.SIGKILL)
            ctx["worker"].popen.wait(10)
            ctx["worker"] = start_worker("soak-worker", concurrency=4)
        elif kind == "redis":
            ctx["redis"].stop()
            time.sleep(1)
            ctx["redis"].start()
        elif kind == "agents":
            ctx["fleet"].kill_agents()
            time.sleep(1)
            ctx["fleet"].start()
        else:
            running = [h for h in ctx["fleet"].hostnames if ctx["fleet"].daemon_pid(h)]
            if not running:
                continue
            target = rng.choice(running)
            ctx["fleet"].kill_daemon(target)
        tally.faults.append((time.monotonic() - start, kind, target))


def audit(fleet, since) -> dict:
    from domains.audit.models import Event
    from domains.computedomains.models import (
        LIVE_PHASES,
        ChannelAllocation,
        ComputeDomain,
        DomainMember,
        Phase,
    )
    from domains.inventory.models import Node

    phases = Counter(ComputeDomain.objects.values_list("phase", flat=True))
    terminal = [Phase.RELEASED, Phase.FAILED]
    held = set(
        DomainMember.objects.filter(active=True, domain__phase__in=LIVE_PHASES).values_list(
            "node__hostname", flat=True
        )
    )
    leaks = {
        "members still active in ended domains": DomainMember.objects.filter(
            active=True, domain__phase__in=terminal
        ).count(),
        "channels still allocated to ended domains": ChannelAllocation.objects.filter(
            released_at__isnull=True, domain__phase__in=terminal
        ).count(),
    }
    tray_leftovers = {
        h: left
        for h in Node.objects.values_list("hostname", flat=True)
        if h not in held and (left := fleet.leftovers(h))
    }
    verbs = Counter(Event.objects.filter(created_at__gte=since).values_list("verb", flat=True))
    return {"phases": phases, "leaks": leaks, "tray_leftovers": tray_leftovers, "verbs": verbs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=int(os.environ.get("BENCH_SOAK_CYCLES", 200)))
    parser.add_argument("--fault-every", type=float, default=4.0, help="mean seconds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    banner(f"soak: {args.cycles} cycles from two tenants, a fault every ~{args.fault_every:g} s")

    import tempfile

    from tests.support.processes import free_port

    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    redis_port = free_port()
    broker = PrivateRedis(redis_port, workdir)
    broker.start()
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    os.environ.update({"PORTAL_HEARTBEAT_STALE_S": "6", "PORTAL_FORMATION_DEADLINE_S": "120"})
    setup_django()

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from domains.audit.events import SYSTEM
    from domains.inventory.models import Node, NodeState
    from domains.inventory.seed import build_fabric
    from domains.tenancy.seed import build_demo_tenants
    from domains.tenancy.tokens import token_create
    from tests.support.agents import AgentFleet
    from tests.support.processes import start_beat, start_server, start_worker

    build_fabric(ip_prefix="127.210", node_state=NodeState.READY)
    build_demo_tenants()
    users = get_user_model().objects
    tokens = {
        u: token_create(actor=SYSTEM, user=users.get(username=u), name="soak")[1]
        for u in ("alice", "bob")
    }
    since = timezone.now()
    server, url = start_server()
    ctx = {"redis": broker, "worker": start_worker("soak-worker", concurrency=4)}
    beat = start_beat()
    fleet = AgentFleet(url, Node.objects.all(), root=workdir / "trays", poll_interval=1.0,
                       heartbeat_interval=2.0)  # fmt: skip
    ctx["fleet"] = fleet
    tally = Tally()
    stop = threading.Event()
    started = time.monotonic()
    try:
        fleet.start()
        fleet.wait_joined(timeout=120)
        tenants = [
            threading.Thread(target=tenant_loop, args=(u, url, ns, tokens[u], tally, args.cycles))
            for u, ns in (("alice", "team-a"), ("bob", "team-b"))
        ]
        faults = threading.Thread(
            target=fault_loop, args=(ctx, tally, args.fault_every, stop, args.seed)
        )
        for t in (*tenants, faults):
            t.start()
        for t in tenants:
            t.join()
        stop.set()
        faults.join()
        time.sleep(5)  # let the last reports land before the audit
        result = audit(fleet, since)
    finally:
        stop.set()
        fleet.stop()
        for proc in (ctx["worker"], beat, server):
            proc.stop()
        broker.stop()
    report(tally, result, time.monotonic() - started)


def report(tally: Tally, result: dict, elapsed: float) -> None:
    kinds = Counter(kind for _, kind, _ in tally.faults)
    lost = sum(result["leaks"].values()) + len(result["tray_leftovers"])
    unfinished = {p: n for p, n in result["phases"].items() if p not in ("Ready", "Released")}
    print(f"duration           {elapsed:.0f} s")
    print(f"cycles completed   {tally.cycles} (failed: {len(tally.failed_cycles)})")
    for line in tally.failed_cycles[:10]:
        print(f"  failed cycle: {line}")
    print(f"faults injected    {len(tally.faults)} {dict(kinds)}")
    survived = len(tally.faults) if not tally.failed_cycles and not unfinished else "see above"
    print(f"faults survived    {survived}")
    print(f"domains by phase   {dict(result['phases'])}")
    print(f"leaks              {result['leaks']}")
    print(f"tray leftovers     {result['tray_leftovers'] or 'none'}")
    print(f"anything lost      {'nothing' if not lost and not unfinished else 'YES'}")
    print("events during the soak (verb: count):")
    for verb, n in sorted(result["verbs"].items()):
        print(f"  {verb:40s} {n}")


if __name__ == "__main__":
    main()
