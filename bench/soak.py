"""Soak with faults: request → Ready → release cycles from two tenants over the REST API
while faults of every kind are injected, then an audit of what was left behind.

Everything is real and private to the run: a PostgreSQL cluster of its own (initdb, a free
port), a redis-server of its own, two uvicorn web processes sharing one listening socket
(one address; kill one and the other keeps accepting), a Celery worker and beat, and one
agent process hosting every emulated tray of two NVL72 racks, each tray with its own
emulated nvidia-imex process. The agents run in a network namespace joined to the host by
a veth pair (testbed/netcut.py), the portal listens on the host end. Fault kinds,
each injected at least `--min-rounds` times (one round = every kind once, shuffled):

- postgres: `pg_ctl -m fast` stop (every session terminated), start again 0.5-3 s later
- redis:    kill -9 the redis-server (broker, Channels layer, cache), start it a second later
- web:      kill -9 one of the two web processes, start it again (the other keeps serving)
- worker:   kill -9 the Celery worker right after a tenant's request (during a placement),
            start a new one
- beat:     kill -9 Celery beat, start it again
- agents:   kill -9 the agent process (daemons live on), start it again
- daemon:   kill -9 one running nvidia-imex
- netcut:   the agents ↔ portal link down for 30-120 s (packets dropped, nothing closed)
- disk:     a tray's root (each is a 16 MiB tmpfs of its own) filled to the last byte for
            10-30 s, a tray in a live domain when there is one
- clock:    the agent process restarted with its wall clock 5 minutes off (libfaketime,
            LD_PRELOAD; monotonic clocks left alone), for 20-40 s, then restarted right

Tenants count every 5xx answer they saw (goal: none) and every connection the web tier
dropped (a web process killed mid-request), and retry. After each fault the harness waits
for the portal to be ready again (PostgreSQL and Redis answer, every agent reporting) and
records how long that took. At the end: every domain must be Ready or Released, no member,
channel, daemon, config or device left on a tray that no live domain holds. Prints cycles,
5xx, faults by kind (injected, recovered, time to recover), anything lost, and the seed.

    .venv/bin/python bench/soak.py [--cycles 200] [--min-rounds 5] [--fault-every 6] [--seed 1]

Needs root (network namespace, tmpfs mount), iproute2, PostgreSQL's initdb/pg_ctl,
redis-server and Debian's `faketime` (libfaketime).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, setup_django

WAIT_S = 480  # a phase may wait out a 120 s cut, the silence before it and the recovery
RECOVER_S = 180
KINDS = [
    "postgres",
    "redis",
    "web",
    "worker",
    "beat",
    "agents",
    "daemon",
    "netcut",
    "disk",
    "clock",
]
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
DISK_MB = 16
TENANTS = (("soak-alice", "soak-a"), ("soak-bob", "soak-b"))


@dataclass
class Tally:
    cycles: int = 0
    failed_cycles: list[str] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    five_xx: Counter = field(default_factory=Counter)  # (status, method, what) -> n
    dropped: Counter = field(default_factory=Counter)  # connection errors by method
    rounds: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    posted: threading.Event = field(default_factory=threading.Event)


class WebPair:
    """Two uvicorn processes accepting on one listening socket: one address, either may die."""

    def __init__(self, host: str, workdir: Path, n: int = 2) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(1024)
        self.sock.set_inheritable(True)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.host = host
        self.workdir = workdir
        self.procs: list[subprocess.Popen | None] = [None] * n
        self.starts = 0

    def start(self, i: int) -> None:
        from testbed.processes import ROOT, VENV_BIN, process_env

        fd = self.sock.fileno()
        self.starts += 1
        log = (self.workdir / f"web{i}-{self.starts}.log").open("wb")
        env = process_env(ALLOWED_HOSTS=f"{self.host},127.0.0.1,localhost", DB_POOL_TIMEOUT="10")
        self.procs[i] = subprocess.Popen(
            [
                str(VENV_BIN / "python"),
                "-m",
                "portal.serve",
                "portal.asgi:application",
                "--fd",
                str(fd),
                "--no-access-log",
            ],
            cwd=ROOT,
            env=env,
            pass_fds=(fd,),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        path = Path(log.name)
        while "Application startup complete" not in path.read_text(errors="replace"):
            if time.monotonic() > deadline or self.procs[i].poll() is not None:
                raise RuntimeError(f"web {i} did not start:\n{path.read_text()[-2000:]}")
            time.sleep(0.1)

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        self.sock.close()

    def five_hundreds_logged(self) -> int:
        return sum(
            p.read_text(errors="replace").count("Internal Server Error")
            for p in self.workdir.glob("web*.log")
        )


# --- tenants ---------------------------------------------------------------------------------
def tenant_loop(name: str, url: str, ns: str, token: str, tally: Tally, args, done) -> None:
    import httpx

    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    rng = random.Random(f"{args.seed}-{name}")
    n = 0
    while not done():
        n += 1
        dname = f"{name}-soak-{n}"
        body = {"metadata": {"name": dname}, "spec": {"numNodes": rng.choice([1, 2, 3, 4])}}
        outcome = run_cycle(client, ns, dname, body, tally)
        with tally.lock:
            if outcome == "ok":
                tally.cycles += 1
            else:
                tally.failed_cycles.append(f"{ns}/{dname}: {outcome}")


def call(client, method: str, path: str, tally: Tally, **kw):
    """One API call, retried while the web tier cannot answer; every 5xx and every dropped
    connection is counted."""
    import httpx

    what = path.rstrip("/").rsplit("/", 1)[-1] if method != "GET" else "GET"
    deadline = time.monotonic() + RECOVER_S
    while time.monotonic() < deadline:
        try:
            resp = client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            with tally.lock:
                tally.dropped[f"{method} {type(exc).__name__}"] += 1
            time.sleep(0.2)
            continue
        if resp.status_code < 500:
            return resp
        with tally.lock:
            tally.five_xx[(resp.status_code, method, what if method == "GET" else "")] += 1
        time.sleep(0.5)
    raise RuntimeError(f"{method} {path} kept failing")


def wait_phase(client, path: str, phases: set[str], tally: Tally) -> str:
    deadline = time.monotonic() + WAIT_S
    phase = "?"
    while time.monotonic() < deadline:
        phase = call(client, "GET", path, tally).json()["status"]["phase"]
        if phase in phases:
            return phase
        time.sleep(0.2)
    return f"stuck in {phase}"


def run_cycle(client, ns: str, name: str, body: dict, tally: Tally) -> str:
    base = f"/api/v1/namespaces/{ns}/computedomains"
    # One key per write: a retry (a web process killed mid-request) is answered, not redone.
    key = f"{ns}-{name}-{uuid.uuid4().hex[:8]}"
    while True:
        resp = call(client, "POST", f"{base}/", tally, json=body, headers=_key(f"{key}-create"))
        if resp.status_code == 422:  # no capacity right now (the other tenant holds it)
            time.sleep(0.5)
            continue
        break
    if resp.status_code == 409 and "exists" in resp.text:
        pass  # a retried POST whose first try had committed: the domain is there
    elif resp.status_code != 201:
        return f"create answered {resp.status_code}: {resp.text[:200]}"
    tally.posted.set()
    phase = wait_phase(client, f"{base}/{name}", {"Ready", "Failed"}, tally)
    if phase != "Ready":
        return f"never Ready ({phase})"
    resp = call(client, "DELETE", f"{base}/{name}", tally, headers=_key(f"{key}-release"))
    if resp.status_code not in (200, 202, 409):
        return f"release answered {resp.status_code}: {resp.text[:200]}"
    phase = wait_phase(client, f"{base}/{name}", {"Released"}, tally)
    return "ok" if phase == "Released" else f"never Released ({phase})"


def _key(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


# --- faults ----------------------------------------------------------------------------------
def fault_loop(ctx: dict, tally: Tally, args, stop: threading.Event) -> None:
    rng = random.Random(args.seed)
    start = time.monotonic()
    while not stop.is_set():
        kinds = list(KINDS)
        rng.shuffle(kinds)
        for kind in kinds:
            if stop.wait(rng.uniform(args.fault_every * 0.5, args.fault_every * 1.5)):
                return
            t0 = time.monotonic()
            try:
                target = inject(kind, ctx, tally, rng)
            except Exception as exc:  # the harness must outlive its own faults
                target = f"injection failed: {type(exc).__name__}: {exc}"
            healed = time.monotonic()
            recovered_s = wait_recovered(ctx)
            tally.faults.append(
                {
                    "t": round(t0 - start, 1),
                    "kind": kind,
                    "target": target,
                    "lasted_s": round(healed - t0, 1),
                    "recovered_s": None if recovered_s is None else round(recovered_s, 1),
                }
            )
            print(f"[{t0 - start:7.1f}s] {kind:8s} {target} · back in {recovered_s}", flush=True)
        with tally.lock:
            tally.rounds += 1


def inject(kind: str, ctx: dict, tally: Tally, rng: random.Random) -> str:
    from testbed.processes import start_beat, start_worker

    fleet, link = ctx["fleet"], ctx["link"]
    if kind == "postgres":
        down = rng.uniform(0.5, 3)
        ctx["pg"].restart(down_s=down)
        return f"down {down:.1f} s"
    if kind == "redis":
        ctx["redis"].stop()
        time.sleep(1)
        ctx["redis"].start()
        return "down 1 s"
    if kind == "web":
        i = rng.randrange(len(ctx["web"].procs))
        ctx["web"].kill(i)
        time.sleep(1)
        ctx["web"].start(i)
        return f"web {i}"
    if kind == "worker":
        tally.posted.clear()
        tally.posted.wait(30)  # a tenant just asked for a domain: its placement is under way
        ctx["worker"].kill(signal.SIGKILL)
        ctx["worker"].popen.wait(10)
        ctx["worker"] = start_worker("soak-worker", concurrency=4)
        return "after a request"
    if kind == "beat":
        ctx["beat"].kill(signal.SIGKILL)
        ctx["beat"].popen.wait(10)
        time.sleep(1)
        ctx["beat"] = start_beat()
        return ""
    if kind == "agents":
        fleet.kill_agents()
        time.sleep(1)
        fleet.start()
        return ""
    if kind == "daemon":
        running = [h for h in fleet.hostnames if fleet.daemon_pid(h)]
        if not running:
            return "none running"
        target = rng.choice(running)
        fleet.kill_daemon(target)
        return target
    if kind == "netcut":
        cut = rng.uniform(30, 120)
        link.cut()
        try:
            time.sleep(cut)
        finally:
            link.heal()
        return f"{cut:.0f} s"
    if kind == "disk":
        hold = rng.uniform(10, 30)
        busy = sorted(trays_in_live_domains())
        host = rng.choice(busy or fleet.hostnames)  # a tray at work if there is one
        filler = fleet.tray_root(host) / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as f:
            while True:
                f.write(b"\0" * (1 << 20))
        # a last partial block too: nothing left for the agent or its daemon
        with contextlib.suppress(OSError), filler.open("ab") as f:
            while True:
                f.write(b"\0" * 4096)
        time.sleep(hold)
        filler.unlink()
        return f"{host} full {hold:.0f} s ({'in a live domain' if busy else 'idle'})"
    if kind == "clock":
        skew = rng.choice(["+5m", "-5m"])
        hold = rng.uniform(20, 40)
        plain = list(fleet.wrap)
        fleet.kill_agents()
        fleet.wrap = [
            *plain,
            "env",
            f"LD_PRELOAD={FAKETIME_LIB}",
            f"FAKETIME={skew}",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
        ]
        fleet.start()
        time.sleep(hold)
        fleet.kill_agents()
        fleet.wrap = plain
        fleet.start()
        return f"{skew} for {hold:.0f} s"
    raise ValueError(kind)


def trays_in_live_domains() -> set[str]:
    from domains.computedomains.models import LIVE_PHASES, DomainMember

    return survive_db(
        lambda: set(
            DomainMember.objects.filter(active=True, domain__phase__in=LIVE_PHASES).values_list(
                "node__hostname", flat=True
            )
        )
    )


def wait_recovered(ctx: dict) -> float | None:
    """Seconds until the portal is ready again (PostgreSQL and Redis answer, every agent
    joined and reporting), or None if not within RECOVER_S."""
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < RECOVER_S:
        try:
            ready = httpx.get(f"{ctx['web'].url}/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            ready = False
        if ready and ctx["fleet"].health().get("ok"):
            return time.monotonic() - t0
        time.sleep(0.5)
    return None


def survive_db(query, timeout: float = 120):
    """Run an ORM query, riding out a PostgreSQL restart (the harness's own connection)."""
    from django.db import close_old_connections, connection
    from django.db.utils import InterfaceError, OperationalError

    deadline = time.monotonic() + timeout
    while True:
        try:
            return query()
        except (OperationalError, InterfaceError):
            if time.monotonic() > deadline:
                raise
            connection.close()
            close_old_connections()
            time.sleep(1)


# --- audit -----------------------------------------------------------------------------------
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

    def run() -> dict:
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

    return survive_db(run)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=int(os.environ.get("BENCH_SOAK_CYCLES", 200)))
    parser.add_argument("--min-rounds", type=int, default=5, help="every fault kind at least")
    parser.add_argument("--fault-every", type=float, default=6.0, help="mean seconds between")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    # Stopped from outside (a background job ignores SIGINT): unwind, so `finally` takes the
    # namespace, mounts, PostgreSQL and Redis down with it.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    banner(
        f"soak: {args.cycles} cycles from two tenants, every fault kind ≥ {args.min_rounds} "
        f"times, one every ~{args.fault_every:g} s, seed {args.seed}"
    )

    import tempfile

    from testbed.netcut import NetnsLink
    from testbed.services import PrivatePostgres, PrivateRedis

    why = NetnsLink.available()
    if why:
        sys.exit(f"soak: needs a network namespace for the agent ↔ portal cut: {why}")
    if not Path(FAKETIME_LIB).exists():
        sys.exit(f"soak: needs libfaketime ({FAKETIME_LIB}: apt-get install faketime)")
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    pg = PrivatePostgres()
    pg.init()
    pg.start()
    redis = PrivateRedis()
    redis.start()
    link = NetnsLink()
    link.up()
    mounts: list[Path] = []
    os.environ["BENCH_DATABASE_URL"] = pg.url("portal")
    os.environ["REDIS_URL"] = redis.url
    os.environ.update(
        {
            "PORTAL_HEARTBEAT_STALE_S": "6",
            "PORTAL_FORMATION_DEADLINE_S": "600",  # formation may wait out a 120 s cut
            "PORTAL_TESTING": "1",
        }
    )
    ctx: dict = {"pg": pg, "redis": redis, "link": link}
    tally = Tally()
    stop = threading.Event()
    started = time.monotonic()
    result: dict = {}
    web = None
    try:
        with contextlib.suppress(Exception):
            pg.create_database("portal")
        setup_django()

        from django.utils import timezone

        from domains.audit.events import SYSTEM
        from domains.inventory.models import Node, NodeState
        from domains.inventory.seed import build_fabric
        from domains.tenancy.tokens import token_create
        from testbed import factories
        from testbed.agents import AgentFleet
        from testbed.processes import start_beat, start_worker

        logging.getLogger("httpx").setLevel(logging.WARNING)
        build_fabric(ip_prefix="127.210", node_state=NodeState.READY)
        tokens = {}
        for user, ns in TENANTS:
            # the demo's users are inert with DEBUG off: tenants of the soak's own
            namespace = factories.make_namespace(
                ns, max_gpus=72, max_nodes=18, max_domains=4, max_nodes_per_domain=8
            )
            member = factories.make_user(user)
            factories.add_member(member, namespace, "member")
            tokens[user] = token_create(actor=SYSTEM, user=member, name="soak")[1]
        since = timezone.now()
        web = ctx["web"] = WebPair(link.host_ip, workdir)
        for i in range(len(web.procs)):
            web.start(i)
        ctx["worker"] = start_worker("soak-worker", concurrency=4)
        ctx["beat"] = start_beat()
        # Every tray's root is a small tmpfs of its own, so the disk fault fills one tray.
        for hostname in Node.objects.values_list("hostname", flat=True):
            root = workdir / "trays" / hostname
            root.mkdir(parents=True)
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(root)],
                check=True,
            )
            mounts.append(root)
        fleet = AgentFleet(
            web.url,
            Node.objects.all(),
            root=workdir / "trays",
            poll_interval=1.0,
            heartbeat_interval=2.0,
            wrap=link.wrap,
            health_host=link.ns_ip,
        )
        ctx["fleet"] = fleet
        fleet.start()
        fleet.wait_joined(timeout=180)

        def done() -> bool:
            with tally.lock:
                return (
                    tally.cycles + len(tally.failed_cycles) >= args.cycles
                    and tally.rounds >= args.min_rounds
                )

        tenants = [
            threading.Thread(
                target=tenant_loop,
                args=(u, web.url, ns, tokens[u], tally, args, done),
                daemon=True,
            )
            for u, ns in TENANTS
        ]
        faults = threading.Thread(target=fault_loop, args=(ctx, tally, args, stop), daemon=True)
        for t in (*tenants, faults):
            t.start()
        for t in tenants:
            t.join()
        stop.set()
        faults.join()
        time.sleep(10)  # let the last reports land before the audit
        result = audit(fleet, since)
        result["web_500s_logged"] = web.five_hundreds_logged()
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            ctx["fleet"].stop()
        for name in ("worker", "beat"):
            with contextlib.suppress(Exception):
                ctx[name].stop()
        if web:
            web.stop()
        for root in mounts:
            subprocess.run(["umount", "-l", str(root)], check=False)
        link.down()
        redis.stop()
        with contextlib.suppress(Exception):
            pg.stop("immediate")
    if result:
        report(tally, result, time.monotonic() - started, args, workdir)


def report(tally: Tally, result: dict, elapsed: float, args, workdir: Path) -> None:
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for f in tally.faults:
        by_kind[f["kind"]].append(f)
    unfinished = {p: n for p, n in result["phases"].items() if p not in ("Ready", "Released")}
    leaks = sum(result["leaks"].values()) + len(result["tray_leftovers"])
    print(f"seed               {args.seed}")
    print(f"duration           {elapsed:.0f} s")
    print(f"cycles completed   {tally.cycles} (failed: {len(tally.failed_cycles)})")
    for line in tally.failed_cycles[:10]:
        print(f"  failed cycle: {line}")
    print(f"5xx seen by tenants {sum(tally.five_xx.values())} {dict(tally.five_xx) or ''}")
    print(f"500s in web logs   {result['web_500s_logged']}")
    print(f"dropped connections {sum(tally.dropped.values())} {dict(tally.dropped) or ''}")
    print(f"faults injected    {len(tally.faults)} in {tally.rounds} rounds")
    print(f"  {'kind':9s} {'injected':>8s} {'recovered':>9s} {'lost':>5s}  recovery s (max)")
    for kind in KINDS:
        faults = by_kind.get(kind, [])
        back = [f["recovered_s"] for f in faults if f["recovered_s"] is not None]
        worst = f"{max(back):.1f}" if back else "-"
        print(f"  {kind:9s} {len(faults):8d} {len(back):9d} {len(faults) - len(back):5d}  {worst}")
    print(f"domains by phase   {dict(result['phases'])}")
    print(f"leaks              {result['leaks']}")
    print(f"tray leftovers     {result['tray_leftovers'] or 'none'}")
    print(f"anything lost      {'nothing' if not leaks and not unfinished else 'YES'}")
    print(f"logs               {workdir}")
    print("events during the soak (verb: count):")
    for verb, n in sorted(result["verbs"].items()):
        print(f"  {verb:40s} {n}")


if __name__ == "__main__":
    main()
