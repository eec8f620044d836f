"""Agent load: 2,000 emulated agents reporting every 10 s against ONE web worker.

The agents are lightweight clients (one asyncio coroutine and one keep-alive connection
each, speaking HTTP/1.1 by hand so the client costs little CPU next to the server on the
same 2-core machine), not full daemons. Each POSTs an idle status report — the heartbeat —
to /api/v1/agent/nodes/<id>/status/ with its own node token, at a random phase within the
period. Prints the sustained rate, p50/p99 latency and errors. Target: p99 < 100 ms.

`--period 0` measures capacity instead: every agent sends its next report as soon as the
last is answered, so the rate printed is the most the server answers. `--web N` runs N
uvicorn processes behind one listening socket (uvicorn --workers N).

    .venv/bin/python bench/agent_load.py [--agents 2000] [--period 10] [--seconds 60] [--web 1]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import subprocess
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=int(os.environ.get("BENCH_AGENTS", 2000)))
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("BENCH_SECS", 60)))
    parser.add_argument("--web", type=int, default=1, help="uvicorn processes")
    args = parser.parse_args()
    pace = f"one report each per {args.period:g} s" if args.period else "back to back (capacity)"
    banner(f"agent load: {args.agents} agents, {pace}, {args.web} web process(es)")
    url = setup_django()
    tokens = prepare(args.agents)
    from tests.support.processes import free_port

    port = free_port()
    # Plain HTTP on loopback: no TLS redirect (the production default sends /healthz to https).
    env = {**os.environ, "DATABASE_URL": url, "DEBUG": "0", "LOG_LEVEL": "WARNING",
           "SECURE_SSL_REDIRECT": "0"}  # fmt: skip
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/python"), "-m", "portal.serve", "portal.asgi:application",
         "--port", str(port), "--no-access-log", "--log-level", "warning",
         "--workers", str(args.web)],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        wait_healthy(server, port)
        if args.web > 1:
            time.sleep(5)  # the first process answers; give the others time to start too
        gc.freeze()  # the client's own full collections would count as server latency
        result = asyncio.run(drive(port, tokens, args.period, args.seconds))
    finally:
        server.terminate()
        server.wait(10)
    lat = [x * 1000 for x in result["latency"]]
    ok = result["codes"].get(200, 0)
    errors = sum(n for code, n in result["codes"].items() if code != 200)
    print(f"requests           {len(lat)} in {result['elapsed']:.1f} s")
    offered = f"{args.agents / args.period:.1f} req/s" if args.period else "as fast as answered"
    print(f"sustained rate     {len(lat) / result['elapsed']:.1f} req/s (offered {offered})")
    print(f"latency            p50 {percentile(lat, 50):.1f} ms  p99 {percentile(lat, 99):.1f} ms  "
          f"max {max(lat):.1f} ms")  # fmt: skip
    print(f"responses          200: {ok}  errors: {errors}  by code: {result['codes']}")
    print(f"target p99 < 100 ms: {'met' if percentile(lat, 99) < 100 else 'NOT met'}")
    print(f"# {load_average()}")


if __name__ == "__main__":
    main()
