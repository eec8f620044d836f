"""How long the Kubernetes sync is without a leader when its leader goes: two `manage.py
kube_sync --leader-elect` replicas against upstream's kube-apiserver (testbed/kube/cluster.py),
as the chart runs them.

Each round starts a leader and a candidate, then
- kills the leader (SIGKILL: no release; the candidate waits the lease out), and
- stops the new leader gracefully (SIGTERM: it releases the Lease; a third takes it),
timing each from the signal to the next replica's "watching nodes". The lease, renew
deadline and retry period default to the chart's (client-go's: 15, 10 and 2 s).

    .venv/bin/python bench/failover.py [--rounds 3] [--lease 15 --renew-deadline 10 --retry 2]

With `--trays` it measures the other failover instead: a tray of a Ready placed domain
killed on the emulator → its replacement Ready (`bench/failover_trays.py`):

    .venv/bin/python bench/failover.py --trays [--rounds 5] [--size 4] [--grace 5]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import banner, setup_django, stats, wait


def replica(kubeconfig: Path, lease: str, timing: argparse.Namespace, name: str) -> Any:
    from testbed.kube.objects import RACK_LABEL
    from testbed.processes import VENV_BIN, Proc, process_env

    argv = [
        str(VENV_BIN / "python"), "manage.py", "kube_sync", "--leader-elect",
        f"--lease-name={lease}", "--lease-namespace=default",
        f"--lease-duration={timing.lease}", f"--renew-deadline={timing.renew_deadline}",
        f"--retry-period={timing.retry}",
    ]  # fmt: skip
    env = process_env(
        KUBECONFIG=str(kubeconfig), PORTAL_KUBE_ENABLED="1", PORTAL_KUBE_RACK_LABEL=RACK_LABEL
    )
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = Proc(name, argv, env)
    wait(lambda: "waiting for the lease" in proc.log() or not proc.alive(), 60, f"{name} up")
    return proc


def leads(proc: Any) -> bool:
    return "watching nodes" in proc.log()


def one_round(kubeconfig: Path, timing: argparse.Namespace, n: int) -> tuple[float, float]:
    """(seconds without a leader after a SIGKILL, after a SIGTERM)."""
    lease = f"bench-failover-{uuid.uuid4().hex[:6]}"
    limit = 4 * timing.lease + 30
    first = replica(kubeconfig, lease, timing, f"failover-{n}-a")
    procs = [first]
    try:
        wait(lambda: leads(first), limit, "the first to lead")
        second = replica(kubeconfig, lease, timing, f"failover-{n}-b")
        procs.append(second)
        killed = time.monotonic()
        first.kill(signal.SIGKILL)
        after_kill = wait(lambda: leads(second), limit, "the second to take over") - killed
        third = replica(kubeconfig, lease, timing, f"failover-{n}-c")
        procs.append(third)
        stopped = time.monotonic()
        second.popen.send_signal(signal.SIGTERM)
        after_stop = wait(lambda: leads(third), limit, "the third to take over") - stopped
        return after_kill, after_stop
    finally:
        for proc in procs:
            proc.stop()


def main() -> int:
    if "--trays" in sys.argv[1:]:
        from bench.failover_trays import main as trays

        return trays([a for a in sys.argv[1:] if a != "--trays"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry", type=float, default=2.0)
    args = parser.parse_args()
    setup_django()
    from testbed.kube.cluster import kube_binaries_built, running_cluster

    if not kube_binaries_built():
        print("bench/failover.py: skipped, upstream's binaries are not built (kube_build.sh)")
        return 0
    banner(
        f"kube_sync failover: lease {args.lease:g} s, renew deadline {args.renew_deadline:g} s, "
        f"retry {args.retry:g} s, {args.rounds} rounds"
    )
    killed, stopped = [], []
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_cluster(Path(tmp)) as cluster,
    ):
        for n in range(args.rounds):
            after_kill, after_stop = one_round(cluster.kubeconfig, args, n)
            killed.append(after_kill)
            stopped.append(after_stop)
            print(f"round {n}: leader killed {after_kill:6.2f} s, stopped {after_stop:6.2f} s")
    print(f"no leader after SIGKILL (lease runs out):  {stats(killed)}")
    print(f"no leader after SIGTERM (lease released):  {stats(stopped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
