"""PID 1 of a real node: run by `unshare` in the node's new PID, network and mount
namespaces (testbed.kube.node), it makes the node's private mounts, then reaps orphans
until it is killed (which ends every process of the node: the kernel kills a PID
namespace with its init).

    python -m testbed.kube.nodeinit NODE_DIR

- a private tmpfs on /run: containerd's state, its socket, the pods' network namespaces
  and /var/run/cdi (/var/run is /run) live there and vanish with the node, as at a reboot;
- files bind-mounted over the host-wide sysctls the kubelet sets (kernel.panic,
  vm.overcommit_memory, …): the kubelet's writes land in `NODE_DIR/sysctl/`, never in the
  machine's kernel;
- the loopback interface up.

It writes `NODE_DIR/init.ready` when done.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

# What the kubelet's container manager writes (setupKernelTunables), as /proc/sys paths.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


def run(*argv: str) -> None:
    subprocess.run(argv, check=True)


def main(node_dir: Path) -> None:
    run("mount", "--make-rprivate", "/")
    run("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
    (Path("/run") / "cdi").mkdir(mode=0o755)
    sysctl_dir = node_dir / "sysctl"
    sysctl_dir.mkdir(exist_ok=True)
    for key in KUBELET_SYSCTLS:
        proc = Path("/proc/sys") / key
        stand_in = sysctl_dir / key.replace("/", ".")
        stand_in.write_text(proc.read_text())
        run("mount", "--bind", str(stand_in), str(proc))
    run("ip", "link", "set", "lo", "up")
    (node_dir / "init.ready").write_text(str(os.getpid()))
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes pause() when an orphan exits
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
