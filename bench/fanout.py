"""Live fan-out: 200 open dashboards on one domain; how long until the last one hears of a
status change.

One uvicorn web process, the real Redis channel layer, 200 websocket clients subscribed to
`ws/live/?topics=domain:<uid>` with real signed-in sessions. The change is real too: one
member's agent reports over the agent API that it failed (Ready → Degraded), then that it
is ready again (→ Ready); each report is timed from just before the POST to the moment the
200th client received the domain's update. Target: < 1 s.

    .venv/bin/python bench/fanout.py [--clients 200] [--changes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.agent_load import wait_healthy
from bench.common import ROOT, banner, setup_django, summary_ms


def prepare(clients: int) -> dict:
    """A Ready 4-tray domain with node tokens, and `clients` signed-in sessions of its
    namespace's members (fixture rows; what is measured is the live path)."""
    from django.conf import settings
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from domains.computedomains.models import ComputeDomain, DomainMember, MemberState, Phase
    from domains.inventory.models import Node, NodeState
    from domains.inventory.seed import build_fabric
    from domains.security import generate_token, hash_token
    from domains.tenancy.models import Membership, Namespace, Role

    build_fabric(ip_prefix="127.202", node_state=NodeState.READY)
    ns = Namespace.objects.create(name="team-live")
    now = timezone.now()
    domain = ComputeDomain.objects.create(
        namespace=ns, name="watched", num_nodes=4, resource_claim_template="watched-channel",
        phase=Phase.READY, admitted_at=now, placed_at=now, ready_at=now,
    )  # fmt: skip
    nodes = list(Node.objects.order_by("pk")[:4])
    tokens = {}
    for index, node in enumerate(nodes):
        raw = generate_token("dpn")
        node.agent_token_hash = hash_token(raw)
        node.save(update_fields=["agent_token_hash"])
        tokens[node.pk] = raw
        DomainMember.objects.create(
            domain=domain, node=node, index=index, clique=node.clique,
            ip_address=node.management_ip, state=MemberState.READY, ready_at=now,
            generation_applied=domain.generation,
        )  # fmt: skip
    users = get_user_model().objects
    sessions = []
    for i in range(clients):
        user = users.create_user(f"watcher{i:03d}", password="bench")
        Membership.objects.create(user=user, namespace=ns, role=Role.VIEWER)
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.create()
        sessions.append(store.session_key)
    node_id = nodes[0].pk
    return {
        "uid": str(domain.uid), "generation": domain.generation, "node_id": node_id,
        "token": tokens[node_id], "sessions": sessions,
    }  # fmt: skip


async def client(url: str, origin: str, session: str, uid: str, inbox: asyncio.Queue) -> None:
    import websockets

    headers = {"Cookie": f"sessionid={session}", "Origin": origin}
    async with websockets.connect(
        f"{url}/ws/live/?topics=domain:{uid}", additional_headers=headers, max_queue=None
    ) as ws:
        hello = json.loads(await ws.recv())
        assert hello.get("topics") == 1, hello
        await inbox.put(("ready", time.monotonic()))
        async for raw in ws:
            msg = json.loads(raw)
            if msg.get("kind") == "domain":
                await inbox.put((msg.get("phase"), time.monotonic()))


async def drive(port: int, fx: dict, changes: int) -> list[float]:
    import httpx

    ws_url, origin = f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}"
    inboxes = [asyncio.Queue() for _ in fx["sessions"]]
    tasks = [
        asyncio.create_task(client(ws_url, origin, s, fx["uid"], q))
        for s, q in zip(fx["sessions"], inboxes, strict=True)
    ]
    for q in inboxes:
        assert (await asyncio.wait_for(q.get(), 60))[0] == "ready"
    status_url = f"{origin}/api/v1/agent/nodes/{fx['node_id']}/status/"
    auth = {"Authorization": f"Node {fx['token']}"}
    timings = []
    async with httpx.AsyncClient(headers=auth, timeout=10) as http:
        for i in range(changes):
            failing = i % 2 == 0
            want = "Degraded" if failing else "Ready"
            report = {
                "domain_uid": fx["uid"], "generation_applied": fx["generation"],
                "step": "failed" if failing else "ready", "daemon_state": "READY",
                "domain_state": "DEGRADED" if failing else "UP",
                "error": "bench: daemon lost" if failing else "",
            }  # fmt: skip
            started = time.monotonic()
            resp = await http.post(status_url, json=report)
            resp.raise_for_status()
            last = 0.0
            for q in inboxes:
                while True:
                    phase, at = await asyncio.wait_for(q.get(), 30)
                    # A report can announce its domain twice (the member, then the phase);
                    # a hint queued before this POST is the previous change's, not this one.
                    if phase == want and at >= started:
                        last = max(last, at)
                        break
            timings.append(last - started)
            await asyncio.sleep(0.2)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)  # close sockets before the server goes
    await asyncio.sleep(0.5)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args()
    banner(f"live fan-out: {args.clients} websocket clients on one domain")
    url = setup_django()
    fx = prepare(args.clients)
    from testbed.processes import free_port

    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "DEBUG": "0"}
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/python"), "-m", "portal.serve", "portal.asgi:application",
         "--port", str(port), "--no-access-log", "--log-level", "warning"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        wait_healthy(server, port)
        timings = asyncio.run(drive(port, fx, args.changes))
    finally:
        server.terminate()
        server.wait(10)
    print(f"status change → last of {args.clients} clients: {summary_ms(timings)}")
    print(f"target < 1 s: {'met' if max(timings) < 1 else 'NOT met'}")


if __name__ == "__main__":
    main()
