"""What the IMEX emulator itself costs, before (a git ref, default `main`) and after (this
checkout), measured one after the other in one run.

No portal, no agents: emulated trays on loopback addresses (`--ip-prefix`, default 127.98)
with their own roots under a temp dir, each with its emulated `nvidia-imex`, driven the way
the agent drives them. Figures:

  ctl       CPU of one `nvidia-imex-ctl -c <config>` call (-q and -N -j) against a formed
            18-tray domain: the ctl process itself (median of 5 batches), and what the
            daemons spent answering it (all 18, per call)
  start     CPU of one daemon from exec to READY, alone (1-node domain; median of 10); and
            per daemon for 18 started at once, up to the moment every one of them is
            connected to every peer (read from their logs, so nothing is asked)
  idle      CPU per daemon per minute of a formed 18-tray domain that nobody asks anything
  messages  lines the daemons send each other (not ctl traffic), counted by a wrapper around
            the socket's send: per daemon while n daemons form a full mesh (and 2 s after),
            per daemon per minute idle, and per `-N -j` on one member (what the domain sent
            during ten of them, one a second, less the idle rate); n = 4, 18, 72

    .venv/bin/python bench/emulator.py [--before main] [--sizes 4,18,72] [--idle-s 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, banner

DRIVER = "580.82.07"
CAPS_MAJOR, CAP_MINOR = 508, 4323  # nvidia-caps and its fabric-imex-mgmt minor

# Runs a daemon's script with the socket's send wrapped to count newline-terminated lines
# sent to peers (identified by SERVER_PORT at either end); writes the count at exit.
COUNTER = r"""
import _socket, os, runpy, socket, sys
port = int(os.environ["BENCH_SERVER_PORT"])
out = os.open(os.environ["BENCH_COUNT_FILE"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
sent = [0]
plain_send = _socket.socket.send
def counting_send(self, data, *args):
    n = plain_send(self, data, *args)
    try:
        peer = port in (self.getsockname()[1], self.getpeername()[1])
    except OSError:
        peer = False
    if peer and n:
        sent[0] += bytes(data[:n]).count(b"\n")
        os.pwrite(out, b"%12d" % sent[0], 0)
    return n
socket.socket.send = counting_send  # daemons built on `socket`
class Counting(_socket.socket):  # daemons built on `_socket`
    __slots__ = ()
    send = counting_send
_socket.socket = Counting
script = sys.argv.pop(1)
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
"""


def extract(ref: str, into: Path) -> Path:
    """The emulator as it is at `ref` (testbed/emulator), as a tree of its own."""
    archive = subprocess.run(
        ["git", "archive", ref, "testbed/emulator", "nodeagent/__init__.py"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "testbed/emulator"


class Trays:
    """n emulated tray roots forming one domain (nodes file = their IPs), not started."""

    def __init__(self, emulator: Path, root: Path, prefix: str, n: int, block: int) -> None:
        self.emulator = emulator
        self.ips = [f"{prefix}.{block}.{i + 1}" for i in range(n)]
        self.port, self.cmd_port = free_port(), free_port()
        self.roots = [root / f"{block}-{i}" for i in range(n)]
        self.procs: list[subprocess.Popen] = []
        for i, tray in enumerate(self.roots):
            self.write_tray(tray, self.ips[i])

    def write_tray(self, tray: Path, ip: str) -> None:
        (tray / "etc/nvidia-imex").mkdir(parents=True)
        (tray / "proc/driver/nvidia").mkdir(parents=True)
        (tray / "run/nvidia-emu").mkdir(parents=True)
        (tray / "var/log").mkdir(parents=True)
        nodes = tray / "etc/nvidia-imex/nodes_config.cfg"
        nodes.write_text("".join(f"{ip}\n" for ip in self.ips))
        (tray / "etc/nvidia-imex/config.cfg").write_text(
            "DAEMONIZE=0\n"
            f"SERVER_PORT={self.port}\nBIND_INTERFACE_IP={ip}\n"
            f"IMEX_CMD_ENABLED=1\nIMEX_CMD_PORT={self.cmd_port}\n"
            f"IMEX_CMD_BIND_INTERFACE_IP={ip}\nIMEX_NODE_CONFIG_FILE={nodes}\n"
            "IMEX_WAIT_FOR_QUORUM=RECOVERY\nIMEX_NODE_DISCONNECTED_GRACE_TIME=-1\n"
            f"LOG_LEVEL=4\nLOG_FILE_NAME={tray / 'var/log/imex.log'}\n"
        )
        (tray / "proc/driver/nvidia/version").write_text(
            f"NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  {DRIVER}  Release Build\n"
        )
        (tray / "run/nvidia-emu/fabric.json").write_text(
            f'{{"hostname": "bench-{ip}", "ip": "{ip}", "driver_version": "{DRIVER}"}}\n'
        )
        # The driver's IMEX management device, which the daemon opens before it starts: the
        # capability's minor, the nvidia-caps major, and the emulator's stand-in for the node.
        (tray / "proc/driver/nvidia/capabilities").mkdir(parents=True)
        (tray / "proc/driver/nvidia/capabilities/fabric-imex-mgmt").write_text(
            f"DeviceFileMinor: {CAP_MINOR}\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
        )
        (tray / "proc/devices").write_text(f"Character devices:\n{CAPS_MAJOR} nvidia-caps\n")
        (tray / "dev/nvidia-caps").mkdir(parents=True)
        (tray / f"dev/nvidia-caps/nvidia-cap{CAP_MINOR}").write_text(f"{CAPS_MAJOR}:{CAP_MINOR}\n")

    def config(self, i: int) -> str:
        return str(self.roots[i] / "etc/nvidia-imex/config.cfg")

    def start(self, *, counting: bool = False) -> None:
        env = {**os.environ, "IMEX_EMU_PYTHON": sys.executable}
        for i, tray in enumerate(self.roots):
            if counting:
                argv = [sys.executable, "-I", "-S", "-c", COUNTER, str(self.emulator / "imex.py")]
                env |= {
                    "BENCH_SERVER_PORT": str(self.port),
                    "BENCH_COUNT_FILE": str(tray / "sent"),
                }
            else:
                argv = [str(self.emulator / "bin/nvidia-imex")]
            self.procs.append(
                subprocess.Popen(
                    [*argv, "-c", self.config(i)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    def ctl(self, i: int, *flags: str) -> str:
        return subprocess.run(
            [str(self.emulator / "bin/nvidia-imex-ctl"), "-c", self.config(i), *flags],
            capture_output=True,
            text=True,
            env={**os.environ, "IMEX_EMU_PYTHON": sys.executable},
        ).stdout

    def connected(self, i: int) -> int:
        """Peers this daemon has logged as connected (both versions log the same line)."""
        log = self.roots[i] / "var/log/imex.log"
        text = log.read_text() if log.exists() else ""
        return len({line.split("connection to node ")[1].split()[0] for line in
                    text.splitlines() if "connection to node " in line and
                    line.endswith("CONNECTED") and "NEVER" not in line})  # fmt: skip

    def wait_mesh(self, timeout: float = 600) -> float:
        n = len(self.roots)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.connected(i) >= n - 1 for i in range(n)):
                return time.monotonic()
            time.sleep(0.05)
        raise TimeoutError(f"{n} daemons did not connect to each other in {timeout}s")

    def wait_up(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            docs = [self.ctl(i, "-N", "-j")[:40] for i in range(len(self.roots))]
            if all('"status": "UP"' in doc for doc in docs):
                return
            time.sleep(0.2)
        raise TimeoutError("domain not UP")

    def cpu(self) -> float:
        """CPU seconds all daemons have used so far."""
        return sum(proc_cpu(p.pid) for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    def sent(self) -> int:
        """Lines sent to peers so far, all daemons together (counting runs only)."""
        total = 0
        for root in self.roots:
            path = root / "sent"
            total += int(path.read_text() or 0) if path.exists() else 0
        return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """CPU seconds of a (single-threaded) process so far, in nanoseconds' resolution
    (/proc/<pid>/schedstat), where /proc/<pid>/stat counts 10 ms ticks."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except FileNotFoundError:
        return 0.0


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ctl_cost(trays: Trays, flags: list[str], calls: int) -> tuple[float, float]:
    """(ctl ms per call: median of 5 batches, daemons' ms per call)."""
    per_batch, daemons_before = [], trays.cpu()
    batch = max(1, calls // 5)
    for _ in range(5):
        before = children_cpu()
        for _ in range(batch):
            trays.ctl(0, *flags)
        per_batch.append((children_cpu() - before) / batch * 1000)
    daemons = (trays.cpu() - daemons_before) / (5 * batch) * 1000
    return statistics.median(per_batch), daemons


def lone_start(emulator: Path, root: Path, prefix: str, runs: int) -> float:
    """Median CPU ms of one daemon from exec to READY (a 1-node domain)."""
    costs = []
    for run in range(runs):
        trays = Trays(emulator, root / f"lone{run}", prefix, 1, 200 + run)
        trays.start()
        pid = trays.procs[0].pid
        deadline = time.monotonic() + 30
        while trays.ctl(0, "-q").strip() != "READY" and time.monotonic() < deadline:
            if trays.procs[0].poll() is not None:
                break
            time.sleep(0.002)
        if trays.procs[0].poll() is not None:  # it refused to start: its cost is no figure
            log = trays.roots[0] / "var/log/imex.log"
            raise RuntimeError(f"the daemon exited before READY: {log.read_text().strip()}")
        costs.append(proc_cpu(pid) * 1000)
        trays.stop()
    return statistics.median(costs)


def measure(name: str, emulator: Path, work: Path, args: argparse.Namespace) -> dict:
    print(f"\n## {name}: {emulator}")
    out: dict = {}
    out["lone_start_ms"] = lone_start(emulator, work, args.ip_prefix, 10)
    print(f"start, one daemon exec → READY: {out['lone_start_ms']:.1f} ms CPU (median of 10)")

    trays = Trays(emulator, work / "rack", args.ip_prefix, 18, 100)
    try:
        trays.start()
        trays.wait_mesh()
        out["mesh_start_ms"] = trays.cpu() / 18 * 1000
        print(f"start, 18 at once → all connected: {out['mesh_start_ms']:.1f} ms CPU per daemon")
        trays.wait_up()
        time.sleep(1)
        for flags in (["-q"], ["-N", "-j"]):
            ctl_ms, daemon_ms = ctl_cost(trays, flags, args.calls)
            out[f"ctl {' '.join(flags)}"] = (ctl_ms, daemon_ms)
            print(
                f"ctl {' '.join(flags):<6} {ctl_ms:5.2f} ms CPU per call (the ctl), "
                f"{daemon_ms:5.2f} ms in the 18 daemons answering it"
            )
        time.sleep(5)
        before, t0 = trays.cpu(), time.monotonic()
        time.sleep(args.idle_s)
        per_min = (trays.cpu() - before) / 18 / (time.monotonic() - t0) * 60 * 1000
        out["idle_ms_per_min"] = per_min
        print(f"idle, formed 18-tray domain: {per_min:.1f} ms CPU per daemon per minute")
    finally:
        trays.stop()

    for n in args.sizes:
        trays = Trays(emulator, work / f"msgs{n}", args.ip_prefix, n, 110 + n)
        try:
            trays.start(counting=True)
            t0 = time.monotonic()
            trays.wait_mesh()
            formed = time.monotonic() - t0
            time.sleep(2)  # let what forming set off settle
            forming = trays.sent()
            t1 = time.monotonic()
            time.sleep(args.idle_s)
            per_s = (trays.sent() - forming) / (time.monotonic() - t1)
            # ten queries, one a second: the old daemons' keepalives come in bursts every
            # 5 s, so a longer window averages them out before the idle rate is taken off
            before, t2 = trays.sent(), time.monotonic()
            for _ in range(10):
                trays.ctl(0, "-N", "-j")
                time.sleep(1)
            query = (trays.sent() - before - per_s * (time.monotonic() - t2)) / 10
        finally:
            trays.stop()
        print(
            f"messages, n={n:<3} forming (full mesh in {formed:5.1f} s): "
            f"{forming / n:8.0f} per daemon ({forming} in all); idle: "
            f"{per_s / n * 60:6.1f} per daemon per minute; one -N -j: {query:.0f} beyond idle"
        )
        idle = per_s / n * 60
        out[f"messages {n}"] = (forming / n, query, idle)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="git ref of the 'before' emulator")
    parser.add_argument("--sizes", default="4,18,72")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--ip-prefix", default="127.98")
    parser.add_argument("--only-after", action="store_true")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    banner("The IMEX emulator's own cost")
    work = Path(tempfile.mkdtemp(prefix="bench-emulator-"))
    try:
        if not args.only_after:
            ref = subprocess.run(
                ["git", "rev-parse", "--short", args.before],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            before = extract(args.before, work / "before")
            measure(f"before ({args.before} = {ref})", before, work / "b", args)
        measure("after (this checkout)", ROOT / "testbed/emulator", work / "a", args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
