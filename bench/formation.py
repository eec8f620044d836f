"""Formation and release latency on the emulator with zero emulated delay.

Everything real except the hardware: the ASGI server, a Celery worker, PostgreSQL
(BENCH_DATABASE_URL), Redis, and one agent fleet process running the reconcile loops of all
trays (`--fleets N`: N processes, whole racks each), each tray with its own emulated
`nvidia-imex` process on its own loopback IP.

Scenarios (trays → domains requested at once): 4 → one 4-tray domain; 18 → one rack-wide
domain; 72 → four rack-wide domains (4 racks); 144 → eight (8 racks). IMEX's default limit
is 18 trays per domain (one NVL72 rack), so larger scenarios are several domains at once.

For each round: request every domain over the REST API, wait until all are Ready; release
them over the API, wait until all are Released. Several domains are requested (and released)
at once, one thread each, as several tenants' jobs would; until 2026-11-24 one client sent
them in turn, so the eighth of 8 domains was admitted 1.1 to 1.6 s after the first. Prints
median and p95 per scenario and where the formation time went:
  portal = request → Forming (admission, placement, channel, members; via a Celery task)
           + last ready report received → domain Ready (the fold and the aggregation)
  agents = Forming → last ready report received (nudge, desired-state fetch, config, mknod, CDI,
           daemon start, peers connecting, readiness polling, the status report)
and the CPU each process used per round (PostgreSQL and Redis: all their processes, shared
with anything else using them), with the web's per tray formed and released:
all of it, and without what the agents' steady heartbeats and polls cost it meanwhile
(measured for 20 s before the scenarios, with no formation going on).

It also prints the timeline of a formation, tray by tray (first, median and last tray or
domain, medians over the rounds), from the (first) request to Ready:
  requested  the domain's `created_at` (its POST admitted)
  placed     the domain's `placed_at` (admission, the placement task, members, channel)
  rendered   the tray's IMEX nodes file written (the nudge, the desired-state fetch, the
             agent's render of config, channels and CDI spec)
  daemon     the tray's `nvidia-imex` started (the emulator's `starts` file)
  peers      the tray's daemon recorded its last peer (its `persist.dat` rewritten; the
             emulator writes it within 50 ms of a change, or when asked before that)
  reported   the portal received the tray's ready report (the `received_at` it stored
             with it: the agent's readiness poll, the report's request)
  Ready      the domain's `ready_at` (the members' reports folded into the phase, on a
             worker, once per burst of reports)
From file modification times and database timestamps on this one machine's clock.

`--web N` runs N uvicorn processes (`--workers N`, one listening socket) and `--workers N`
N Celery workers, to show what a second process of each buys.

    .venv/bin/python bench/formation.py [--rounds 5] [--sizes 4,18,72,144] [--web 1] [--workers 1]

`--racks N` makes each size one domain over N racks (`spec.spanRacks`: one clique in each,
one IMEX ensemble per clique, the trays split evenly): `--racks 4 --sizes 72` is one 72-tray
domain over 4 racks, Ready when all four ensembles are.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, load_average, setup_django, stats, wait

TRAYS_PER_RACK = 18
FIRST_RACK = 101  # trays at 127.<base>.101.x … away from the tests' 127.<base>.1.x
STAGES = ("requested", "placed", "rendered", "daemon", "peers", "reported", "Ready")
TRAY_STAGES = STAGES[2:6]  # the stages read per tray; the others are the domain's


def cpu_seconds(pid: int, *, children: bool) -> float:
    """CPU time of a process and its live descendants (uvicorn's worker processes), or of
    the children it has reaped (for the fleet: its daemons and every nvidia-imex-ctl it
    ran)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in (fields[13:15] if children else fields[11:13]))
    seconds = ticks / os.sysconf("SC_CLK_TCK")
    if children:
        return seconds
    return seconds + sum(cpu_seconds(kid, children=False) for kid in _children(pid))


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def start_web(processes: int):
    """One uvicorn, or `processes` of them behind one listening socket (uvicorn --workers)."""
    from testbed.processes import start_server

    if processes == 1:
        return start_server(LOG_LEVEL="WARNING")
    import httpx

    from testbed.processes import VENV_BIN, Proc, free_port, process_env, wait_until

    port = free_port()
    argv = [str(VENV_BIN / "python"), "-m", "portal.serve", "portal.asgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
            "--workers", str(processes)]  # fmt: skip
    proc = Proc("web", argv, process_env(LOG_LEVEL="WARNING"))
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=60, what="web servers")
    wait_until(lambda: len(_children(proc.pid)) >= processes, timeout=30, what="web workers")
    return proc, url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="4,18,72,144")
    parser.add_argument(
        "--racks",
        type=int,
        default=0,
        help="each size as ONE domain over this many racks (spec.spanRacks; one IMEX "
        "ensemble per rack's clique), instead of rack-wide domains",
    )
    parser.add_argument("--web", type=int, default=1, help="uvicorn processes")
    parser.add_argument("--workers", type=int, default=1, help="Celery worker processes")
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the trays' roots (configs, daemon logs, agent log) under this directory",
    )
    parser.add_argument(
        "--fleets", type=int, default=1, help="agent fleet processes (the racks split among them)"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    setup_django(PORTAL_TESTING="1", LOG_LEVEL="WARNING")
    import httpx

    from domains.audit.events import SYSTEM
    from domains.computedomains.models import ComputeDomain, DomainMember, Phase
    from domains.inventory.models import Node
    from domains.tenancy.tokens import token_create
    from testbed import factories
    from testbed.agents import AgentFleet
    from testbed.processes import running, start_worker

    racks = max(1, args.racks, -(-max(sizes) // TRAYS_PER_RACK))
    ip_prefix = factories.tray_ip_prefix()  # TEST_TRAY_IP_BASE keeps two runs apart
    built = factories.make_racks(*["18"] * racks, ip_prefix=ip_prefix, first_rack=FIRST_RACK)
    ns = factories.make_namespace("bench")
    user = factories.make_user("bench")
    factories.add_member(user, ns, "member")
    _, raw = token_create(actor=SYSTEM, user=user, name="bench")

    banner("Formation and release on the emulator (zero emulated delay)")
    print(
        f"# {racks} racks x 18 trays; {args.web} web process(es), {args.workers} Celery "
        f"worker(s) (4 threads each), {args.fleets} agent fleet process(es)"
        + (f"; each size ONE domain over {args.racks} racks (spanRacks)" if args.racks else "")
    )
    server, url = start_web(args.web)
    workers = [
        # INFO: start_worker waits for the worker's "ready." line, which WARNING hides.
        start_worker(f"worker{i}", concurrency=4, LOG_LEVEL="INFO")
        for i in range(args.workers)
    ]
    api = httpx.Client(
        base_url=f"{url}/api/v1/namespaces/bench",
        headers={"Authorization": f"Bearer {raw}"},
        timeout=60,
        # uvicorn closes a connection idle for 5 s, httpx keeps one for 5 s: between rounds
        # the two crossed and a DELETE met a reset. Let go of idle connections first.
        limits=httpx.Limits(keepalive_expiry=2.0),
    )
    nodes = Node.objects.filter(rack__in=built)
    groups = [built[i :: args.fleets] for i in range(args.fleets)]  # whole racks per process
    with running(*workers, server), contextlib.ExitStack() as stack:
        fleet = Fleets(
            [
                stack.enter_context(
                    AgentFleet(
                        url,
                        Node.objects.filter(rack__in=racks_of).order_by("pk"),
                        poll_interval=10,
                        heartbeat_interval=10,
                        name=f"agents{i}",
                        root=args.keep / f"agents{i}" if args.keep else None,
                    )
                )
                for i, racks_of in enumerate(groups)
                if racks_of
            ]
        )
        fleet.wait_joined(timeout=600)  # 144 agents on a loaded machine take minutes
        postmaster, redis_pid = _postmaster_pid(), _redis_pid()
        print(f"# {nodes.count()} agents joined")
        idle = _idle_web_cpu(server.pid)
        print(f"# idle: heartbeats and polls alone cost the web {idle:.3f} s of CPU/s\n")
        header = f"{'trays':>5} {'domains':>7}  {'request → Ready':<34}  {'release → Released':<34}"
        print(header)
        print("-" * len(header))
        for size in sizes:
            per_domain = size if args.racks else min(size, TRAYS_PER_RACK)
            spec = {"spanRacks": args.racks} if args.racks else {}
            count = size // per_domain
            ready_t, release_t, portal_t, agent_t = [], [], [], []
            timelines: list[dict[str, list[float]]] = []
            lasts: list[tuple[str, tuple[float, ...]]] = []  # the tray reported last, per round
            procs = {
                "web": [(server.pid, False)],
                "worker": [(w.pid, False) for w in workers],
                "agents": [(pid, False) for pid in fleet.pids],
                "IMEX daemons+ctl": [(pid, True) for pid in fleet.pids],
                # Shared with anything else using this machine's PostgreSQL and Redis
                "PostgreSQL": [(postmaster, False), (postmaster, True)] if postmaster else [],
                "Redis": [(redis_pid, False)] if redis_pid else [],
            }
            cpu_before = {name: _cpu(pids) for name, pids in procs.items()}
            served_before = _served(fleet, nodes)
            started = time.monotonic()
            for rnd in range(args.rounds + 1):  # round 0 warms up
                names = [f"b{size}-{rnd}-{i}" for i in range(count)]
                t0, wall0 = time.monotonic(), time.time()
                for resp in at_once(
                    lambda name, n=per_domain, spec=spec: api.post(
                        "/computedomains/",
                        json={"metadata": {"name": name}, "spec": {"numNodes": n} | spec},
                    ),
                    names,
                ):
                    assert resp.status_code == 201, resp.text
                domains = ComputeDomain.objects.filter(namespace=ns, name__in=names)
                t_ready = wait(
                    lambda d=domains, n=count: d.filter(phase=Phase.READY).count() == n,
                    120,
                    f"{count} domains Ready",
                )
                split = _split(domains, DomainMember)
                timeline, last = _timeline(list(domains), wall0, fleet, DomainMember)
                timelines.append(timeline)
                lasts.append(last)
                t1 = time.monotonic()
                for resp in at_once(lambda name: api.delete(f"/computedomains/{name}/"), names):
                    assert resp.status_code in (200, 202), resp.text
                t_released = wait(
                    lambda d=domains, n=count: d.filter(phase=Phase.RELEASED).count() == n,
                    120,
                    f"{count} domains Released",
                )
                if rnd == 0:
                    continue
                ready_t.append(t_ready - t0)
                release_t.append(t_released - t1)
                portal_t.append(split[0])
                agent_t.append(split[1])
            print(f"{size:>5} {count:>7}  {stats(ready_t):<34}  {stats(release_t):<34}")
            cpu = {
                name: (_cpu(pids) - cpu_before[name]) / (args.rounds + 1)
                for name, pids in procs.items()
            }
            round_s = (time.monotonic() - started) / (args.rounds + 1)
            served = [
                (after - before) / (args.rounds + 1) / size
                for after, before in zip(_served(fleet, nodes), served_before, strict=True)
            ]
            portal, agents = statistics.median(portal_t), statistics.median(agent_t)
            total = portal + agents
            print(
                f"{'':>14}formation split (medians): portal {portal * 1000:.0f} ms "
                f"({portal / total:.0%}), agents+IMEX {agents * 1000:.0f} ms ({agents / total:.0%})"
            )
            print(
                f"{'':>14}CPU per round: "
                + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in cpu.items())
            )
            print(
                f"{'':>14}per tray per round: {served[0]:.2f} daemon starts, nvidia-imex-ctl "
                f"{served[1]:.1f} x -q and {served[2]:.1f} x -N, {served[3]:.1f} rows sent to "
                f"peers' -N; the daemons' own CPU {served[4]:.1f} ms (the rest of IMEX's is "
                f"the ctl calls: {cpu['IMEX daemons+ctl'] * 1000 / size - served[4]:.1f} ms)"
            )
            net = max(0.0, cpu["web"] - idle * round_s)
            print(
                f"{'':>14}web CPU per tray formed and released: {cpu['web'] / size * 1000:.1f} "
                f"ms; without the idle heartbeats and polls of the {round_s:.1f} s round: "
                f"{net / size * 1000:.1f} ms; {load_average()}"
            )
            if timelines:
                _print_timeline(timelines)
                _print_rounds(ready_t, lasts[1:])
    print(
        "\nTargets: 18 trays median < 1 s; 144 trays < 3 s; one 72-tray domain over 4 racks "
        "< 1.5 s (portal share <= 100 ms); release as fast."
    )
    return 0


def at_once(call, names: list[str]) -> list:
    """`call(name)` for every name at the same time, as that many tenants' jobs would."""
    if len(names) == 1:
        return [call(names[0])]
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return list(pool.map(call, names))


class Fleets:
    """Agent fleet processes, each hosting the trays of some racks."""

    def __init__(self, fleets) -> None:
        self.fleets = fleets
        self.pids = [f.proc.pid for f in fleets]
        self._of = {host: f for f in fleets for host in f.hostnames}

    def wait_joined(self, timeout: float) -> None:
        for f in self.fleets:
            f.wait_joined(timeout=timeout)

    def tray_root(self, hostname: str) -> Path:
        return self._of[hostname].tray_root(hostname)


def _idle_web_cpu(pid: int, seconds: float = 20.0) -> float:
    """The web's CPU per second while the agents only heartbeat and poll (no formation)."""
    before = cpu_seconds(pid, children=False)
    time.sleep(seconds)
    return (cpu_seconds(pid, children=False) - before) / seconds


def _served(fleet, nodes) -> list[int]:
    """Daemon starts, then `-q` and `-N` calls answered, rows sent to peers' `-N` and the
    daemons' own CPU in ms, summed over the trays (from the emulator's `starts` and `served`
    files; a daemon writes its counts when it stops)."""
    from testbed.emulator.tray import EMU_DIR

    totals = [0, 0, 0, 0, 0]
    for hostname in nodes.values_list("hostname", flat=True):
        emu = fleet.tray_root(hostname) / EMU_DIR
        with contextlib.suppress(FileNotFoundError):
            totals[0] += len((emu / "starts").read_text().splitlines())
        with contextlib.suppress(FileNotFoundError):
            for line in (emu / "served").read_text().splitlines():
                for k, count in enumerate(line.split()[:4], start=1):
                    totals[k] += float(count)
    return totals


def _postmaster_pid() -> int | None:
    """PostgreSQL's postmaster on this machine (its CPU and its exited backends'), if the
    data directory is readable here."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        data_dir = cursor.fetchone()[0]
    try:
        return int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _redis_pid() -> int | None:
    from django.core.cache import cache

    try:
        return int(cache._cache.get_client().info("server")["process_id"])
    except Exception:  # a figure we can go without
        return None


def _cpu(pids: list[tuple[int, bool]]) -> float:
    return sum(cpu_seconds(pid, children=c) for pid, c in pids)


def _timeline(
    domains, wall0: float, fleet, member_model
) -> tuple[dict[str, list[float]], tuple[str, tuple[float, ...]]]:
    """Seconds after the first request at which each tray (and each domain) passed each
    stage (see the docstring), and the tray reported last with its `TRAY_STAGES`."""
    from nodeagent.config import Paths
    from testbed.emulator.tray import EMU_DIR

    def mtime(path: Path) -> float:
        return path.stat().st_mtime - wall0

    out: dict[str, list[float]] = {stage: [] for stage in STAGES}
    last: tuple[str, tuple[float, ...]] = ("", ())
    for domain in domains:
        out["requested"].append(domain.created_at.timestamp() - wall0)
        out["placed"].append(domain.placed_at.timestamp() - wall0)
        out["Ready"].append(domain.ready_at.timestamp() - wall0)
    for hostname, ready_at, report in member_model.objects.filter(domain__in=domains).values_list(
        "node__hostname", "ready_at", "node__agent_report"
    ):
        root = fleet.tray_root(hostname)
        tray = (
            mtime(Paths(root).nodes_file),
            mtime(root / EMU_DIR / "starts"),
            mtime(root / "var/run/nvidia-imex/persist.dat"),
            _received(report, ready_at).timestamp() - wall0,
        )
        for stage, seconds in zip(TRAY_STAGES, tray, strict=True):
            out[stage].append(seconds)
        if not last[1] or tray[-1] > last[1][-1]:
            last = (hostname, tray)
    return out, last


def _print_timeline(timelines: list[dict[str, list[float]]]) -> None:
    """First, median and last tray per stage (medians over the rounds), and how much each
    stage added to the last tray's path."""
    print(f"{'':>14}timeline from the request, ms (first / median / last tray; medians of rounds)")
    before = 0.0
    for stage in STAGES:
        first = statistics.median(min(t[stage]) for t in timelines) * 1000
        middle = statistics.median(statistics.median(t[stage]) for t in timelines) * 1000
        last = statistics.median(max(t[stage]) for t in timelines) * 1000
        print(
            f"{'':>16}{stage:<9} {first:7.0f} / {middle:7.0f} / {last:7.0f}"
            f"   (+{last - before:.0f} on the last tray's path)"
        )
        before = last


def _print_rounds(ready_t: list[float], lasts: list[tuple[str, tuple[float, ...]]]) -> None:
    """Every measured round, and the tray reported last in it: where an outlier went."""
    print(f"{'':>14}rounds, request → Ready, and the tray reported last in each:")
    for seconds, (host, stages) in zip(ready_t, lasts, strict=True):
        marks = ", ".join(
            f"{stage} {t * 1000:.0f}" for stage, t in zip(TRAY_STAGES, stages, strict=True)
        )
        print(f"{'':>16}{seconds * 1000:7.0f} ms   {host}: {marks} ms")


def _split(domains, member_model) -> tuple[float, float]:
    """(portal, agents) seconds for the slowest domain of a round, from DB timestamps."""
    worst = (0.0, 0.0)
    for d in domains:
        rows = member_model.objects.filter(domain=d).values_list("ready_at", "node__agent_report")
        last_member = max(_received(report, ready_at) for ready_at, report in rows)
        portal = (d.placed_at - d.created_at).total_seconds()
        portal += max(0.0, (d.ready_at - last_member).total_seconds())
        agents = (last_member - d.placed_at).total_seconds()
        if portal + agents > sum(worst):
            worst = (portal, agents)
    return worst


def _received(report: dict | None, folded):
    """When the portal received the tray's ready report (stored with it), or, once a later
    report replaced it, when the fold marked the member ready."""
    from datetime import datetime

    stamp = (report or {}).get("received_at")
    received = datetime.fromisoformat(stamp) if stamp else folded
    return min(received, folded)


if __name__ == "__main__":
    sys.exit(main())
