"""The second outside attack (docs/security.md), run by bench/attack.py after the first:
what a compromised tray, a malicious tenant and an outsider tried against the portal's
identity, queues, limits and sockets, each with its figure.

- a tray's own node token changing its identity (metadata IP, 64 made-up GPUs, another
  rack's clique): refused or held for an operator, then put back as it was;
- a tenant's webhook tarpit (its subscriptions at a host that accepts and never answers):
  another tenant's request → Ready, with and without it;
- a 200 MB body, and slow bodies (a byte every 2 s) from many connections;
- a guesser and a bystander on one address; sockets after a membership ends and after a
  logout; sockets per user and per tray; refusals that fill the audit log; token mints and
  subscription creates per minute; the IPv6 SSRF residue.

Each returns findings (text, held) and prints its figures. Needs the demo's agents' state
(`--agent-root`, default var/agents): the node token a compromised tray holds.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

Finding = tuple[str, bool]
Hit = Callable[..., Any]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _source() -> httpx.HTTPTransport:
    """A loopback source address of its own: this attack's limits never meet another's."""
    return httpx.HTTPTransport(
        local_address=f"127.0.{uuid.uuid4().int % 200 + 30}.{uuid.uuid4().int % 250 + 1}"
    )


# --- a compromised tray ---------------------------------------------------------------------


def tray_identity(url: str, operator: str, agent_root: Path, hit: Hit) -> list[Finding]:
    """A tray's own node token reports the metadata address, 64 made-up GPUs and another
    rack's clique; then its real identity again, and the operator accepts it back."""
    stolen = _a_trays_token(agent_root)
    if stolen is None:
        return [("tray identity: no agent state under --agent-root (skipped)", False)]
    node_id, token, hostname = stolen
    op = _auth(operator)
    with httpx.Client(base_url=url, timeout=30) as client:
        nodes = hit(client.get("/api/v1/nodes/?limit=1000", headers=op)).json()["results"]
        mine = next(n for n in nodes if n["hostname"] == hostname)
        other = next(n for n in nodes if n["rack"] != mine["rack"] and n["clique"])
        facts = _real_facts(agent_root, hostname)  # what the tray's own probe says
        agent = {"Authorization": f"Node {token}"}
        put = f"/api/v1/agent/nodes/{node_id}/facts/"
        metadata = hit(client.put(put, json=facts | {"ip": "169.254.169.254"}, headers=agent))
        gpus = [{"index": i, "uuid": f"GPU-attack-{i}"} for i in range(64)]
        theirs = other["clique"].rpartition(".")
        moved = facts | {"gpus": gpus, "cluster_uuid": theirs[0], "clique_id": int(theirs[2])}
        hit(client.put(put, json=moved, headers=agent), bad_input=True)
        held = hit(client.get(f"/api/v1/nodes/{hostname}/", headers=op)).json()
        hit(client.put(put, json=facts, headers=agent))  # its real identity again
        back = hit(client.post(f"/api/v1/nodes/{hostname}/accept/", json={}, headers=op))
        after = hit(client.get(f"/api/v1/nodes/{hostname}/", headers=op)).json()
    change = held.get("identityChange") or {}
    restored = after["clique"] == mine["clique"] and after["gpuCount"] == len(facts["gpus"])
    return [
        (
            f"a tray reports 169.254.169.254 as its IP: {metadata.status_code}",
            metadata.status_code == 400,
        ),
        (
            f"a tray reports rack {other['rack']}'s clique and 64 GPUs: {held['state']}, "
            f"{sorted(change.get('changes', {}))} held",
            held["state"] == "pending"
            and held["clique"] == mine["clique"]
            and held["gpuCount"] == mine["gpuCount"],
        ),
        (
            f"it reports its real identity again, the operator accepts it: {back.status_code}, "
            f"{after['state']}, {after['gpuCount']} GPUs",
            back.status_code == 200 and restored and after["state"] == "ready",
        ),
    ]


def _real_facts(root: Path, hostname: str) -> dict[str, Any]:
    """The tray's identity as its (emulated) NVML and host report it: its real agent's."""
    fabric = json.loads((root / hostname / "run/nvidia-emu/fabric.json").read_text())
    keys = ("hostname", "ip", "cluster_uuid", "clique_id", "gpus")
    return {k: fabric[k] for k in keys}


def _a_trays_token(root: Path) -> tuple[int, str, str] | None:
    for state in sorted(root.glob("*/var/lib/domain-portal/agent/node.json")):
        saved = json.loads(state.read_text())
        return int(saved["node_id"]), saved["token"], state.parents[4].name
    return None


def cross_tray_refusals(url: str, admin: str, agent_root: Path, hit: Hit) -> list[Finding]:
    """300 requests of one tray's token for other trays: one audit line that counts them."""
    stolen = _a_trays_token(agent_root)
    if stolen is None:
        return [("cross-tray refusals: no agent state (skipped)", False)]
    node_id, token, hostname = stolen
    listing = "/api/v1/events/?verb=agent.access_denied&limit=1000"
    with httpx.Client(base_url=url, timeout=30) as client:
        before = hit(client.get(listing, headers=_auth(admin))).json()["count"]
        for i in range(300):
            hit(
                client.get(
                    f"/api/v1/agent/nodes/{node_id + 1 + i % 5}/desired/",
                    headers={"Authorization": f"Node {token}"},
                )
            )
        after = hit(client.get(listing, headers=_auth(admin))).json()
    lines = after["count"] - before
    mine = next((e for e in after["results"] if e["node"] == hostname), {})
    print(
        f"  300 refused cross-tray requests: {lines} new audit line(s), "
        f"counted {mine.get('details', {}).get('count', '?')}"
    )
    return [(f"300 refused cross-tray requests wrote {lines} audit line(s)", lines <= 1)]


# --- a tenant's webhooks --------------------------------------------------------------------


class Tarpit:
    """Accepts every connection and never answers, until closed."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.listener.accept()[0])

    def close(self) -> None:
        for conn in [*self.held, self.listener]:
            conn.close()


def request_to_ready(url: str, token: str, namespace: str, hit: Hit) -> float:
    """Seconds from a one-tray request to Ready (the demo's agents form it); released after."""
    name = f"probe-{uuid.uuid4().hex[:6]}"
    base = f"/api/v1/namespaces/{namespace}/computedomains/"
    body = {"metadata": {"name": name}, "spec": {"numNodes": 1, "gpusPerNode": 4}}
    with httpx.Client(base_url=url, timeout=30, headers=_auth(token)) as client:
        for _ in range(60):  # the namespace's quota may still hold domains being released
            started = time.monotonic()
            created = hit(client.post(base, json=body))
            if created.status_code != 422:
                break
            time.sleep(1)
        if created.status_code != 201:
            return float("nan")
        phase = ""
        while phase != "Ready" and time.monotonic() - started < 180:
            time.sleep(0.1)
            phase = hit(client.get(f"{base}{name}/")).json()["status"]["phase"]
        took = time.monotonic() - started
        hit(client.delete(f"{base}{name}/"))
    return took if phase == "Ready" else float("inf")


def _median(samples: Any) -> float:
    ordered = sorted(x for x in samples if x == x)  # NaN: the request was refused
    return float(ordered[len(ordered) // 2]) if ordered else float("nan")


def webhook_tarpit(url: str, alice: str, bob: str, hit: Hit) -> list[Finding]:
    """alice's webhooks all point at a tarpit; bob's request → Ready (median of 3), before
    and while they hang."""
    baseline = _median(request_to_ready(url, bob, "team-b", hit) for _ in range(3))
    pit = Tarpit()
    made: list[int] = []
    codes: Counter[int] = Counter()
    with httpx.Client(base_url=url, timeout=30, headers=_auth(alice)) as client:
        for i in range(40):
            body = {"channel": "webhook", "kinds": ["domain.ready"], "target": f"{pit.url}/{i}"}
            resp = hit(client.post("/api/v1/subscriptions/", json=body))
            codes[resp.status_code] += 1
            if resp.status_code == 201:
                made.append(resp.json()["id"])
        request_to_ready(url, alice, "team-a", hit)  # its Ready fires them all
        time.sleep(1)
        during = _median(request_to_ready(url, bob, "team-b", hit) for _ in range(3))
        for pk in made:  # deleted while their deliveries hang in the tarpit
            hit(client.delete(f"/api/v1/subscriptions/{pk}/"))
    held = len(pit.held)
    pit.close()
    print(
        f"  webhook tarpit: subscriptions {dict(codes)}; {held} connections held; bob's "
        f"request → Ready (median of 3) {baseline:.2f} s before, {during:.2f} s during"
    )
    return [
        (
            f"bob's request → Ready with alice's tarpit: {during:.2f} s (baseline {baseline:.2f})",
            during < baseline + 1.0,
        ),
        (f"alice's 40 webhooks: {dict(codes)} (cap per user)", codes[201] <= 20),
    ]


# --- bodies ---------------------------------------------------------------------------------


def _host_port(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
    return host, int(port or 80)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    sock.close()
    return data


def huge_body(url: str, hit: Hit) -> list[Finding]:
    """A 200 MB body announced: answered after how much of it was sent?"""
    sock = socket.create_connection(_host_port(url), timeout=30)
    head = (
        b"POST /api/v1/tokens/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 200000000\r\n\r\n"
    )
    sent = 0
    with contextlib.suppress(OSError):
        sock.sendall(head)
        sock.settimeout(0.5)
        while sent < 200_000_000:
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break
            except TimeoutError:
                pass
            sock.sendall(b" " * (1 << 20))
            sent += 1 << 20
    sock.settimeout(30)
    reply = _read_all(sock)
    status = reply[9:12].decode() or "none"
    print(f"  200 MB body: {status} after {sent >> 20} MiB sent")
    return [
        (f"a 200 MB body: {status} after {sent >> 20} MiB", status == "413" and sent < 10 << 20)
    ]


def slow_bodies(url: str, connections: int = 400, wait_s: float = 40) -> list[Finding]:
    """`connections` bodies announced as 100 kB, sent at a byte every 2 s, from 8 addresses:
    how many are still open after `wait_s`."""
    host, port = _host_port(url)
    socks = []
    for i in range(connections):
        with contextlib.suppress(OSError):
            sock = socket.create_connection(
                (host, port), timeout=5, source_address=(f"127.0.77.{i % 8 + 1}", 0)
            )
            sock.sendall(
                b"POST /api/v1/agent/join/ HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            )
            socks.append(sock)
    started = time.monotonic()
    while time.monotonic() - started < wait_s:
        time.sleep(2)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b" ")
    answers: Counter[str] = Counter()
    still_open = 0
    for sock in socks:
        sock.settimeout(0.2)
        try:
            data = sock.recv(64)
            answers[data[9:12].decode() or "closed"] += 1
        except TimeoutError:
            still_open += 1
        except OSError:
            answers["reset"] += 1
        sock.close()
    print(
        f"  {connections} slow bodies: {still_open} still open after {wait_s:.0f} s; "
        f"answers {dict(answers)}"
    )
    return [(f"{connections} slow bodies: {still_open} open after {wait_s:.0f} s", still_open == 0)]


# --- sign-in, sockets, ceilings, SSRF -------------------------------------------------------


def _sign_in(client: httpx.Client, username: str, password: str) -> httpx.Response:
    client.get("/login/")
    form = {
        "username": username,
        "password": password,
        "csrfmiddlewaretoken": client.cookies.get("csrftoken", ""),
    }
    return client.post("/login/", data=form)


def bystander(url: str, password: str, hit: Hit, tries: int = 26) -> list[Finding]:
    """A guesser walks accounts from bob's address past its ceiling and goes on; bob, from
    the browser he signed in with before, signs in `tries` times meanwhile."""
    address = f"127.0.{uuid.uuid4().int % 200 + 30}.{uuid.uuid4().int % 250 + 1}"
    stop = threading.Event()

    def guess() -> None:
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(base_url=url, timeout=30, transport=transport) as guesser:
            i = 0
            while not stop.is_set():
                guesser.cookies.clear()
                hit(_sign_in(guesser, f"nobody-{i % 300}", "guess"))
                i += 1

    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=url, timeout=30, transport=transport) as bob:
        first = hit(_sign_in(bob, "bob", password))
        device = bob.cookies.get("portal_device", "")
        threads = [threading.Thread(target=guess, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(15)  # past the address's ceiling (100 failures in 5 minutes)
        got_in, answers = 0, Counter()
        for _ in range(tries):
            bob.cookies.clear()
            bob.cookies.set("portal_device", device)
            resp = hit(_sign_in(bob, "bob", password))
            answers[resp.status_code] += 1
            got_in += resp.status_code == 302
        stop.set()
        for t in threads:
            t.join()
    print(
        f"  bystander: first sign-in {first.status_code}; then {got_in} of {tries} in while "
        f"a guesser went on ({dict(answers)})"
    )
    return [
        (f"bob signs in {got_in} of {tries} times beside a guesser", got_in == tries),
        (f"bob's answers never say wrong password: {dict(answers)}", 200 not in answers),
    ]


def _live(url: str, client: httpx.Client, topics: str) -> Any:
    from websockets.sync.client import connect

    ws_url = url.replace("http", "ws", 1) + f"/ws/live/?topics={topics}"
    headers = {"Cookie": f"sessionid={client.cookies['sessionid']}", "Origin": url}
    return connect(ws_url, additional_headers=headers, open_timeout=10)


def _heard(ws: Any, timeout: float) -> list[str]:
    kinds = []
    with contextlib.suppress(TimeoutError):
        while True:
            kinds.append(json.loads(ws.recv(timeout=timeout)).get("kind", ""))
    return kinds


def sockets_follow_access(url: str, password: str, admin: str, bob: str, hit: Hit) -> list[Finding]:
    """alice's open socket on team-a after the admin removes her from it (4 hints sent), and
    after she logs out; then she is a member again."""
    from websockets.exceptions import ConnectionClosed

    findings = []
    with httpx.Client(base_url=url, timeout=30, transport=_source()) as alice:
        hit(_sign_in(alice, "alice", password))
        members = "/api/v1/namespaces/team-a/members/alice/"
        with _live(url, alice, "namespace:team-a") as ws:
            ws.recv(timeout=10)  # hello
            hit(httpx.delete(url + members, headers=_auth(admin)))
            for i in range(4):  # things happen in team-a
                hit(
                    httpx.put(
                        f"{url}/api/v1/namespaces/team-a/members/bob/",
                        json={"role": "viewer" if i % 2 == 0 else "member"},
                        headers=_auth(admin),
                    )
                )
            heard = [k for k in _heard(ws, 3) if k != "access"]
            hit(httpx.delete(f"{url}/api/v1/namespaces/team-a/members/bob/", headers=_auth(admin)))
            hit(httpx.put(url + members, json={"role": "member"}, headers=_auth(admin)))
        findings.append((f"a removed member's socket heard {len(heard)} of 4 hints", not heard))
        with _live(url, alice, "me") as ws:
            ws.recv(timeout=10)
            hit(alice.post("/logout/", headers={"X-CSRFToken": alice.cookies["csrftoken"]}))
            try:
                _heard(ws, 5)
                closed = False
            except ConnectionClosed:
                closed = True
        findings.append((f"a logged-out session's socket closed: {closed}", closed))
    return findings


def socket_caps(url: str, password: str, agent_root: Path) -> list[Finding]:
    """60 live sockets of one user; 20 agent sockets on one node token."""
    from websockets.sync.client import connect

    opened = []
    with httpx.Client(base_url=url, timeout=30, transport=_source()) as alice:
        _sign_in(alice, "alice", password)
        for _ in range(60):
            with contextlib.suppress(Exception):
                ws = _live(url, alice, "me")
                first = json.loads(ws.recv(timeout=5))
                opened.append(ws) if first.get("kind") == "hello" else ws.close()
    users = len(opened)
    stolen = _a_trays_token(agent_root)
    agents = 0
    if stolen is not None:
        agent_url = url.replace("http", "ws", 1) + "/ws/agent/"
        for _ in range(20):
            with contextlib.suppress(Exception):
                ws = connect(agent_url, additional_headers={"Authorization": f"Node {stolen[1]}"})
                try:
                    ws.recv(timeout=0.5)
                    ws.close()
                except TimeoutError:
                    opened.append(ws)
                    agents += 1
    for ws in opened:
        ws.close()
    print(f"  sockets held: {users} of 60 by one user, {agents} of 20 by one tray's token")
    return [
        (f"one user holds {users} of 60 sockets", users <= 50),
        (f"one tray's token holds {agents} of 20 agent sockets", agents <= 4),
    ]


def ceilings(url: str, alice: str, hit: Hit) -> list[Finding]:
    """30 token mints and 30 subscription creates in a row by one user."""
    with httpx.Client(base_url=url, timeout=30, headers=_auth(alice)) as client:
        mints = Counter(
            hit(client.post("/api/v1/tokens/", json={"name": f"m{i}"})).status_code
            for i in range(30)
        )
        body = {"channel": "in_app", "kinds": ["domain.ready"]}
        subs = Counter(
            hit(client.post("/api/v1/subscriptions/", json=body)).status_code for _ in range(30)
        )
        retry = client.post("/api/v1/tokens/", json={"name": "x"}).headers.get("Retry-After")
        for sub in client.get("/api/v1/subscriptions/?limit=1000").json()["results"]:
            if sub["channel"] == "in_app":
                client.delete(f"/api/v1/subscriptions/{sub['id']}/")
    print(
        f"  30 token mints: {dict(mints)}; 30 subscription creates: {dict(subs)}; "
        f"Retry-After {retry}"
    )
    return [
        (f"30 token mints in a row: {dict(mints)}", mints[429] > 0 and retry is not None),
        (f"30 subscription creates in a row: {dict(subs)}", subs[201] <= 20),
    ]


def ssrf_residue(url: str, alice: str, hit: Hit) -> list[Finding]:
    targets = [
        "http://[::ffff:0:a9fe:a9fe]/",
        "http://[::ffff:0:a00:1]/",
        "http://[fec0::1]/",
        "http://[5f00::1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
    ]
    refused = 0
    with httpx.Client(base_url=url, timeout=30, headers=_auth(alice)) as client:
        for target in targets:
            body = {"channel": "webhook", "kinds": ["domain.ready"], "target": target}
            resp = hit(client.post("/api/v1/subscriptions/", json=body), bad_input=True)
            refused += resp.status_code == 400
            if resp.status_code == 201:
                client.delete(f"/api/v1/subscriptions/{resp.json()['id']}/")
    return [
        (
            f"IPv4-translated, site-local and other non-global targets: {refused} of "
            f"{len(targets)} refused",
            refused == len(targets),
        )
    ]


def run(
    url: str, tokens: dict[str, str], password: str, agent_root: Path, hit: Hit
) -> list[Finding]:
    """Every attack of this module, in an order that leaves the demo as it was."""
    findings: list[Finding] = []
    print("SSRF residue, tray identity, refusals …")
    findings += ssrf_residue(url, tokens["alice"], hit)
    findings += tray_identity(url, tokens["operator"], agent_root, hit)
    findings += cross_tray_refusals(url, tokens["admin"], agent_root, hit)
    print("webhook tarpit …")
    findings += webhook_tarpit(url, tokens["alice"], tokens["bob"], hit)
    print("bodies …")
    findings += huge_body(url, hit)
    findings += slow_bodies(url)
    print("sign-in bystander, sockets, ceilings …")
    findings += bystander(url, password, hit)
    findings += sockets_follow_access(url, password, tokens["admin"], tokens["bob"], hit)
    findings += socket_caps(url, password, agent_root)
    time.sleep(60)  # the tarpit's subscription creates out of this minute's count
    findings += ceilings(url, tokens["alice"], hit)
    return findings
