"""Agent load: 2,000 emulated agents reporting every 10 s against ONE web worker.

The agents are lightweight clients (one asyncio coroutine and one keep-alive connection
each, speaking HTTP/1.1 by hand so the client costs little CPU next to the server on the
same 2-core machine), not full daemons. Each POSTs an idle status report — the heartbeat —
to /api/v1/agent/nodes/<id>/status/ with its own node token, at a random phase within the
period. Prints the sustained rate, p50/p99 latency and errors. Target: p99 < 100 ms.

`--period 0` measures capacity instead: every agent sends its next report as soon as the
last is answered, so the rate printed is the most the server answers. `--web N` runs N
uvicorn processes behind one listening socket (uvicorn --workers N). On 2 cores shared
with PostgreSQL, the Python client above costs about as much CPU as the server, so capacity
is driven by `wrk` (Debian's package; C, one thread, a Lua script giving each request
its agent's URL and token) when it is installed: `--client wrk`, the default for
`--period 0`. `--compare 1,2` measures one web process, then two, then one and two again in
one run and prints the ratio. Every run also prints the web's CPU per request (all its
processes) and the client's, so what a second process could buy is visible even where the
cores are not free to show it. `--pin` pins web process i to CPU i (`sched_setaffinity`).

    .venv/bin/python bench/agent_load.py [--agents 2000] [--period 10] [--seconds 60] [--web 1]
    .venv/bin/python bench/agent_load.py --agents 200 --period 0 --seconds 20 --compare 1,2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, banner, load_average, percentile, setup_django

REPORT = json.dumps(
    {"domain_uid": None, "generation_applied": 0, "step": "idle", "clean": True}
).encode()


def prepare(agents: int) -> list[tuple[int, str]]:
    """A fabric with enough trays, each with a node token (fixture data, stored hashed)."""
    from domains.inventory.models import Node, NodeState
    from domains.inventory.seed import RackLayout, build_fabric
    from domains.security import generate_token, hash_token

    racks = -(-agents // 18)
    build_fabric([RackLayout((18,))] * racks, ip_prefix="127.201", node_state=NodeState.READY)
    nodes = list(Node.objects.order_by("pk")[:agents])
    tokens = []
    for node in nodes:
        raw = generate_token("dpn")
        node.agent_token_hash = hash_token(raw)
        tokens.append((node.pk, raw))
    Node.objects.bulk_update(nodes, ["agent_token_hash"], batch_size=1000)
    return tokens


def wait_healthy(server: subprocess.Popen, port: int, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"web server exited with {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("web server did not become healthy")


async def post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> int:
    writer.write(data)
    status_line = await reader.readline()
    if not status_line:
        raise ValueError("connection closed")
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def agent(
    host: str, port: int, node_id: int, token: str, period: float, until: float, out: dict
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST /api/v1/agent/nodes/{node_id}/status/ HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Node {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(REPORT)}\r\n\r\n"
    ).encode()
    next_at = time.monotonic() + random.uniform(0, period)
    while next_at < until:
        if period:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        started = time.monotonic()
        code = 0
        for attempt in range(2):  # a keep-alive the server closed while idle: reconnect once
            try:
                if writer.is_closing() or reader.at_eof():
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                code = await post(reader, writer, head + REPORT)
                break
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
                writer.close()
                if attempt == 0:
                    reader, writer = await asyncio.open_connection(host, port)
        out["latency"].append(time.monotonic() - started)
        out["codes"][code] = out["codes"].get(code, 0) + 1
        next_at += period * random.uniform(0.95, 1.05)  # agents jitter their heartbeat
        if not period:
            next_at = time.monotonic()  # capacity: the next report at once
    writer.close()


async def drive(port: int, tokens: list[tuple[int, str]], period: float, seconds: float) -> dict:
    out: dict = {"latency": [], "codes": {}}
    start = time.monotonic()
    await asyncio.gather(
        *(agent("127.0.0.1", port, nid, tok, period, start + seconds, out) for nid, tok in tokens)
    )
    out["elapsed"] = seconds  # the offered window; every request was scheduled inside it
    return out


WRK_SCRIPT = """
local agents = {%s}
local body = '%s'
local requests = {}
local i = 0
function init(args)
  for k, a in ipairs(agents) do
    requests[k] = wrk.format("POST", "/api/v1/agent/nodes/" .. a[1] .. "/status/",
      {["Host"] = "127.0.0.1", ["Authorization"] = "Node " .. a[2],
       ["Content-Type"] = "application/json"}, body)
  end
end
function request()
  i = i %% #requests + 1
  return requests[i]
end
"""


def run_wrk(port: int, tokens: list[tuple[int, str]], seconds: float) -> dict:
    """Capacity with wrk: as many connections as agents, each request the next agent's."""
    agents = ",".join(f'{{{nid},"{tok}"}}' for nid, tok in tokens)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT % (agents, REPORT.decode()))
    argv = ["wrk", "-t1", f"-c{len(tokens)}", f"-d{seconds:g}s", "--latency", "--timeout", "10s",
            "-s", script.name, f"http://127.0.0.1:{port}/"]  # fmt: skip
    before = os.times()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    after = os.times()
    os.unlink(script.name)
    out = done.stdout
    if done.returncode != 0 or "Requests/sec" not in out:
        raise SystemExit(f"wrk failed: {done.stdout}{done.stderr}")

    def ms(label: str) -> float:
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return float("nan")
        return float(m[1]) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m[2]]

    total = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {
        "requests": total,
        "rate": float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1]),  # type: ignore[index]
        "p50": ms("50"),
        "p99": ms("99"),
        "errors": int(bad[1]) if bad else 0,
        "socket_errors": errors[1] if errors else "none",
        "client_cpu": (after.children_user + after.children_system)
        - (before.children_user + before.children_system),
    }


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live children (uvicorn's worker processes)."""
    from bench.formation import cpu_seconds

    return cpu_seconds(pid, children=False)


def postgres_cpu(url: str) -> float:
    """CPU seconds of the PostgreSQL backends serving the bench database (the web's pooled
    connections: they live as long as the server), read from /proc on this machine."""
    import psycopg

    from bench.formation import cpu_seconds

    with psycopg.connect(url, autocommit=True) as conn:
        pids = [
            pid
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ]
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # gone meanwhile
            total += cpu_seconds(pid, children=False)
    return total


def start_web(url: str, port: int, processes: int, pin: bool) -> subprocess.Popen:
    # Plain HTTP on loopback: no TLS redirect (the production default sends /healthz to https).
    env = {**os.environ, "DATABASE_URL": url, "DEBUG": "0", "LOG_LEVEL": "WARNING",
           "SECURE_SSL_REDIRECT": "0"}  # fmt: skip
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/python"), "-m", "portal.serve", "portal.asgi:application",
         "--port", str(port), "--no-access-log", "--log-level", "warning",
         "--workers", str(processes)],
        cwd=ROOT, env=env,
    )  # fmt: skip
    wait_healthy(server, port)
    if processes > 1:
        from bench.formation import _children

        deadline = time.monotonic() + 60
        while len(_children(server.pid)) < processes and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # the first process answers; give the others time to start too
    if pin:
        from bench.formation import _children

        workers = _children(server.pid) if processes > 1 else [server.pid]
        for i, pid in enumerate(workers):
            os.sched_setaffinity(pid, {i % os.cpu_count()})  # type: ignore[operator]
    return server


def measure(url: str, tokens: list[tuple[int, str]], args: argparse.Namespace, web: int) -> dict:
    from testbed.processes import free_port

    port = free_port()
    server = start_web(url, port, web, args.pin)
    try:
        # Warm every process (imports on first request, the pool's connections).
        if args.client == "wrk":
            run_wrk(port, tokens, 2)
        cpu0, pg0 = tree_cpu(server.pid), postgres_cpu(url)
        if args.client == "wrk":
            result = run_wrk(port, tokens, args.seconds)
        else:
            gc.freeze()  # the client's own full collections would count as server latency
            before = time.process_time()
            raw = asyncio.run(drive(port, tokens, args.period, args.seconds))
            lat = [x * 1000 for x in raw["latency"]]
            result = {
                "requests": len(lat),
                "rate": len(lat) / raw["elapsed"],
                "p50": percentile(lat, 50),
                "p99": percentile(lat, 99),
                "max": max(lat),
                "errors": sum(n for code, n in raw["codes"].items() if code != 200),
                "codes": raw["codes"],
                "client_cpu": time.process_time() - before,
            }
        result["web_cpu"] = tree_cpu(server.pid) - cpu0
        result["pg_cpu"] = postgres_cpu(url) - pg0
    finally:
        server.terminate()
        server.wait(10)
    result["web"] = web
    return result


def show(r: dict, args: argparse.Namespace) -> None:
    n = max(r["requests"], 1)
    per = {k: r[f"{k}_cpu"] / n * 1000 for k in ("web", "pg", "client")}
    print(f"{r['web']} web process(es): {r['requests']} requests in {args.seconds:g} s, "
          f"{r['rate']:.1f} req/s; p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms; "
          f"errors {r['errors']}; CPU per request: web {per['web']:.2f} ms (the processes "
          f"used {r['web_cpu'] / args.seconds:.2f} cores), PostgreSQL {per['pg']:.2f} ms, "
          f"client {per['client']:.3f} ms; {load_average()}")  # fmt: skip


def modelled(results: list[dict], cores: int) -> str:
    """What the measured CPU per request allows on `cores` cores free for this alone: one
    web process at most one core; N of them and PostgreSQL and the client sharing them."""
    n = sum(r["requests"] for r in results)
    web, pg, client = (sum(r[f"{k}_cpu"] for r in results) / n for k in ("web", "pg", "client"))
    one = min(1 / web, cores / (web + pg + client))
    two = min(2 / web, cores / (web + pg + client))
    return (f"on {cores} free cores the CPU per request above allows {one:.0f} req/s with one "
            f"web process and {two:.0f} with two: {two / one:.2f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=int(os.environ.get("BENCH_AGENTS", 2000)))
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("BENCH_SECS", 60)))
    parser.add_argument("--web", type=int, default=1, help="uvicorn processes")
    parser.add_argument("--client", choices=["python", "wrk"], default=None)
    parser.add_argument("--compare", default="", help="e.g. 1,2: these web counts, twice over")
    parser.add_argument("--pin", action="store_true", help="web process i on CPU i")
    args = parser.parse_args()
    if args.client is None:
        args.client = "wrk" if args.period == 0 and shutil.which("wrk") else "python"
    if args.client == "wrk" and args.period != 0:
        raise SystemExit("--client wrk measures capacity: use it with --period 0")
    pace = f"one report each per {args.period:g} s" if args.period else "back to back (capacity)"
    counts = [int(n) for n in args.compare.split(",")] * 2 if args.compare else [args.web]
    banner(f"agent load: {args.agents} agents, {pace}, client {args.client}, web {counts}")
    url = setup_django()
    tokens = prepare(args.agents)
    results = []
    for web in counts:
        results.append(measure(url, tokens, args, web))
        show(results[-1], args)
    if args.compare:
        rates: dict[int, list[float]] = {}
        for r in results:
            rates.setdefault(r["web"], []).append(r["rate"])
        base = counts[0]
        for web, seen in rates.items():
            if web != base:
                ratio = sum(seen) / sum(rates[base])
                print(f"capacity {web} / {base} web process(es): {ratio:.2f}x "
                      f"({' + '.join(f'{x:.0f}' for x in seen)} vs "
                      f"{' + '.join(f'{x:.0f}' for x in rates[base])} req/s)")  # fmt: skip
        for cores in (2, 4):
            print(modelled(results, cores))
        return
    r = results[0]
    if args.client == "python":
        print(f"latency            max {r['max']:.1f} ms; by code: {r['codes']}")
        print(f"target p99 < 100 ms: {'met' if r['p99'] < 100 else 'NOT met'}")


if __name__ == "__main__":
    main()
