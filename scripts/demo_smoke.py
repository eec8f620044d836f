"""`make demo-smoke`: the README's main command, used the way a newcomer would.

Starts `make demo` exactly as the README says (no DATABASE_URL, REDIS_URL or PORT: the demo
brings its own PostgreSQL and Redis), signs in as alice, requests a 4-tray domain over the
API, waits for Ready, releases it, checks its trays are clean (no channel device left, no
IMEX daemon running), checks as bob that the seeded domain over two racks is Ready with
an IMEX ensemble in each, checks that the terminal showed the address only once the server
answered and no periodic task's runs at INFO, stops the demo with Ctrl-C (SIGINT to its
process group) and checks that nothing of it is left running or listening. Prints each
step's time; exits non-zero with the reason and the demo's log tail on the first thing that
goes wrong.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the stand-in world (testbed/) is not installed, only checked out

from testbed import devservices  # noqa: E402

PORT = 8000  # the README's address
URL = f"http://127.0.0.1:{PORT}"
LOG = ROOT / "test-artifacts" / "demo-smoke.log"
MARK = "PORTAL_DEMO_SMOKE"  # names this run's processes (read back from /proc/<pid>/environ)
STARTED = time.monotonic()


class SmokeFailed(Exception):
    pass


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {message}", flush=True)


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    return devservices.wait_for(check, timeout_s, what, interval_s=0.5)


def healthy() -> bool:
    try:
        return httpx.get(f"{URL}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def marked_processes(run: str) -> list[str]:
    """Live processes started by this run's demo (they inherit its environment)."""
    found = []
    needle = f"{MARK}={run}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z":
            found.append(f"{entry.name}: {cmd.strip()[:160]}")
    return found


def sign_in_as(username: str, password: str) -> httpx.Client:
    """A bearer token for `username`, minted through the sign-in page's session."""
    browser = httpx.Client(base_url=URL, timeout=30)
    browser.get("/login/").raise_for_status()
    form = {
        "username": username,
        "password": password,
        "csrfmiddlewaretoken": browser.cookies.get("csrftoken", ""),
    }
    signed_in = browser.post("/login/", data=form)
    if signed_in.status_code != 302:
        raise SmokeFailed(f"sign-in as {username}: {signed_in.status_code}")
    minted = browser.post(
        "/api/v1/tokens/",
        json={"name": f"demo-smoke-{uuid.uuid4().hex[:6]}"},
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
    )
    if minted.status_code != 201:
        raise SmokeFailed(f"token for {username}: {minted.status_code} {minted.text[:300]}")
    token = minted.json()["token"]
    return httpx.Client(
        base_url=f"{URL}/api/v1", timeout=30, headers={"Authorization": f"Bearer {token}"}
    )


def tray_roots() -> dict[str, Path]:
    """hostname → the emulated tray's root, as the demo's fleet spec lays them out."""
    spec = json.loads((ROOT / "var/agents/fleet.json").read_text())
    return {t["hostname"]: ROOT / "var/agents" / t["hostname"] for t in spec["trays"]}


def tray_state(root: Path) -> tuple[list[str], bool]:
    """(the channel device nodes present, whether its IMEX daemon is running)."""
    channels_dir = root / "dev/nvidia-caps-imex-channels"
    channels = (
        sorted(p.name for p in channels_dir.glob("channel*")) if channels_dir.exists() else []
    )
    pidfile = root / "var/lib/domain-portal/imex/nvidia-imex.pid"
    alive = False
    if pidfile.exists():
        pid_text = pidfile.read_text().split()
        if pid_text and pid_text[0].isdigit():
            alive = Path(f"/proc/{pid_text[0]}").exists()
    return channels, alive


def form_and_release(api: httpx.Client) -> None:
    name = f"smoke-{uuid.uuid4().hex[:6]}"
    path = "/namespaces/team-a/computedomains/"
    created = api.post(path, json={"metadata": {"name": name}, "spec": {"numNodes": 4}})
    if created.status_code != 201:
        raise SmokeFailed(f"alice's 4-tray request: {created.status_code} {created.text[:400]}")
    say(f"requested {name} (4 trays) as alice: {created.json()['status']['phase']}")

    def phase() -> dict[str, Any]:
        body: dict[str, Any] = api.get(f"{path}{name}/").json()
        return body

    asked = time.monotonic()
    body = wait_for(lambda: (b := phase())["status"]["phase"] == "Ready" and b, 180, "Ready")
    say(f"{name} Ready in {time.monotonic() - asked:.1f} s")
    members = [n["name"] for n in body["status"]["nodes"]]
    roots = tray_roots()
    formed = {m: tray_state(roots[m]) for m in members}
    if not all(channels and alive for channels, alive in formed.values()):
        raise SmokeFailed(f"Ready, but not every tray has a channel and a daemon: {formed}")

    released = api.delete(f"{path}{name}/")
    if released.status_code not in (200, 202, 204):
        raise SmokeFailed(f"release: {released.status_code} {released.text[:300]}")
    asked = time.monotonic()
    wait_for(lambda: phase()["status"]["phase"] == "Released", 120, "Released")
    say(f"{name} Released in {time.monotonic() - asked:.1f} s")
    wait_for(
        lambda: all(tray_state(roots[m]) == ([], False) for m in members),
        30,
        "trays clean after release",
    )
    say(f"trays clean: {', '.join(members)}")


def check_spanning(api: httpx.Client) -> None:
    """bob's seeded `nccl-allreduce` forms over both racks: Ready with one IMEX ensemble per
    clique, every tray with a channel and a running daemon."""
    path = "/namespaces/team-b/computedomains/nccl-allreduce/"
    asked = time.monotonic()
    body = wait_for(
        lambda: (b := api.get(path).json()).get("status", {}).get("phase") == "Ready" and b,
        180,
        "the seeded nccl-allreduce Ready",
    )
    cliques = body["status"]["cliques"]
    racks = sorted({c["rack"] for c in cliques})
    if len(cliques) != 2 or len(racks) != 2:
        raise SmokeFailed(f"nccl-allreduce should span two racks: {cliques}")
    roots = tray_roots()
    formed = {n["name"]: tray_state(roots[n["name"]]) for n in body["status"]["nodes"]}
    if not all(channels and alive for channels, alive in formed.values()):
        raise SmokeFailed(f"nccl-allreduce Ready, but a tray lacks a channel or daemon: {formed}")
    say(
        f"bob's nccl-allreduce Ready over {', '.join(racks)} "
        f"({time.monotonic() - asked:.1f} s more)"
    )


def check_terminal(text: str) -> None:
    """What the terminal showed: the address once the server answered (not before), and no
    line at INFO for a run of one of beat's periodic tasks."""
    banner, serving = text.find("Domain Portal demo →"), text.find("Uvicorn running on")
    if banner < 0 or serving < 0 or banner < serving:
        raise SmokeFailed("the demo's address was not printed after the web server answered")
    periodic = re.findall(
        r".* INFO celery\.\S+ .*(?:Sending due task|computedomains\.reconcile\[).*", text
    )
    if periodic:
        raise SmokeFailed(f"periodic tasks' runs logged at INFO: {periodic[:3]}")
    say("terminal: address after the server answered; periodic tasks quiet")


def stop(demo: subprocess.Popen[bytes], run: str, ports: list[int]) -> None:
    os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C in the terminal that ran `make demo`
    try:
        demo.wait(90)
    except subprocess.TimeoutExpired:
        raise SmokeFailed("make demo still running 90 s after Ctrl-C") from None
    say(f"make demo exited ({demo.returncode}) after Ctrl-C")
    deadline = time.monotonic() + 15
    while marked_processes(run) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = marked_processes(run)
    still = [p for p in ports if devservices.port_open(p)]
    if left or still:
        raise SmokeFailed(f"left behind: processes {left}, ports {still}")


def main() -> int:
    if devservices.port_open(PORT):
        print(f"demo-smoke: port {PORT} is in use; stop what runs there first", file=sys.stderr)
        return 1
    run = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "PORT"}}
    env[MARK] = run
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("wb") as log:
        demo = subprocess.Popen(
            ["make", "demo"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    ports = [PORT]
    try:
        wait_for(lambda: healthy() or demo.poll() is not None, 300, "the demo's web server")
        if demo.poll() is not None:
            raise SmokeFailed(f"make demo exited with {demo.returncode}")
        text = LOG.read_text(errors="replace")
        ports += [int(p) for p in re.findall(r"Private (?:PostgreSQL|Redis) at \S+:(\d+)/", text)]
        say(f"make demo up at {URL} (private services on ports {ports[1:]})")
        form_and_release(sign_in_as("alice", "demo"))
        check_spanning(sign_in_as("bob", "demo"))
        check_terminal(LOG.read_text(errors="replace"))
        stop(demo, run, ports)
    except (SmokeFailed, RuntimeError, httpx.HTTPError, OSError, KeyError) as exc:
        print(f"demo-smoke FAILED: {exc}", file=sys.stderr)
        print(LOG.read_text(errors="replace")[-4000:], file=sys.stderr)
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)
            try:
                demo.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
        return 1
    say("demo-smoke passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
