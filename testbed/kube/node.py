"""Real Kubernetes nodes for the tests: upstream's kubelet with containerd and runc, joined
to the suite's control plane (testbed.kube.cluster), each in namespaces of its own.

    with real_nodes(cluster, [("gb-r01-t01", "10.40.1.1")], workdir, ports=[portal]) as nodes:
        node = nodes["gb-r01-t01"]
        ...                          # pods scheduled there really start
        node.restart_kubelet()       # containers keep running
        node.reboot()                # a new boot: every process and /run gone

What a node is made of:

- binaries: the kubelet from tools/kubeplane (the control plane's Kubernetes version,
  scripts/kube_build.sh), containerd, ctr and the runc shim from containerd's Go module
  (scripts/containerd_build.sh), Debian's runc and CNI plugins;
- namespaces: `unshare` makes a PID, network and mount namespace whose init is
  testbed.kube.nodeinit (a private tmpfs /run, the kubelet's host-wide sysctls taken by
  files, loopback up). containerd and the kubelet join them with `nsenter`; killing the
  init ends every process of the node, the containers' too, and the namespaces with them;
- network (testbed.kube.nodenet): the node's `eth0` on a fabric bridge in a namespace of
  the fixture's own, holding the node's IP; the API server's and the portal's ports
  relayed from 127.0.0.1 inside the node to the host's loopback; pods on a CNI bridge
  inside the node;
- cgroups: a root of its own (`/dp-node-<id>-<n>` in every cgroup v1 hierarchy), the
  kubelet's `cgroupRoot`, removed when the node is gone;
- images: testbed.kube.nodeimage's busybox and pause images, imported with `ctr`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed.kube.cluster import Cluster, ClusterKube, kube_binaries
from testbed.kube.nodeconfig import CONTAINERD_SOCKET, cni_conflist, containerd_toml, kubelet_config
from testbed.kube.nodeimage import busybox_static, write_layout
from testbed.kube.nodenet import Forwarder, in_netns, join_fabric, make_fabric_bridge
from testbed.processes import ROOT, VENV_BIN, Proc, wait_until

CONTAINERD_BUILD = ROOT / "scripts/containerd_build.sh"
CGROUP_FS = Path("/sys/fs/cgroup")
START_TIMEOUT_S = 60.0
# A node's init (and with it every process of the node) and the fabric are killed when the
# process that started them dies, however it dies: nothing of a node outlives its test run.
ORPHAN_KILLED = ("setpriv", "--pdeathsig", "KILL", "--")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def containerd_binaries() -> Path:
    """containerd's bin directory, built first when missing (`CONTAINERD_BIN_DIR`: prebuilt)."""
    if named := os.environ.get("CONTAINERD_BIN_DIR"):
        return Path(named)
    done = subprocess.run([str(CONTAINERD_BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{CONTAINERD_BUILD.name} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def containerd_built() -> bool:
    return subprocess.run([str(CONTAINERD_BUILD), "--check"], capture_output=True).returncode == 0


def missing_for_nodes() -> list[str]:
    """What this machine lacks to run a real node (empty: it can)."""
    missing = [] if os.geteuid() == 0 else ["root"]
    for tool in ("unshare", "nsenter", "setpriv", "ip", "mount"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if not Path("/usr/sbin/runc").exists():
        missing.append("runc (Debian's runc)")
    if not (Path("/usr/lib/cni") / "bridge").exists():
        missing.append("CNI plugins (Debian's containernetworking-plugins)")
    if not busybox_static():
        missing.append("busybox (Debian's busybox-static)")
    if not (CGROUP_FS / "memory").is_dir():
        missing.append("cgroup v1 hierarchies under /sys/fs/cgroup")
    return missing


def cgroup_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy mounted under /sys/fs/cgroup (not the unified one)."""
    return sorted(
        p for p in CGROUP_FS.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
        and not (p / "cgroup.controllers").exists()
    )  # fmt: skip


def make_cgroup_root(name: str) -> None:
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / name
        path.mkdir(exist_ok=True)
        if (path / "cpuset.cpus").exists():  # a new cpuset is empty: no task may join it
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((hierarchy / knob).read_text())


def remove_cgroup_root(name: str, timeout: float = 20) -> None:
    """The node's cgroups, deepest first, once their last task is gone: in every v1
    hierarchy, and in the unified one, where runc makes each container's too."""
    deadline = time.monotonic() + timeout
    unified = [CGROUP_FS / "unified"] if (CGROUP_FS / "unified/cgroup.controllers").exists() else []
    for hierarchy in [*cgroup_hierarchies(), *unified]:
        top = hierarchy / name
        if not top.exists():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for path in [*dirs, top]:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)


@dataclass
class RealNode:
    """One node: its name, IP, directory and the processes running it."""

    name: str
    ip: str
    index: int
    dir: Path
    cluster: Cluster
    kube_bin: Path
    containerd_bin: Path
    cgroup_root: str
    forward_ports: list[int]
    fabric_pid: int
    init: Proc | None = None
    containerd: Proc | None = None
    kubelet: Proc | None = None
    forwarder: Forwarder | None = None
    boots: int = 0
    logs: list[Path] = field(default_factory=list)

    # --- paths ----------------------------------------------------------------------------
    @property
    def kubelet_dir(self) -> Path:
        return self.dir.parent / "kubelet" / self.name

    @property
    def pod_cidr(self) -> str:
        return f"10.{200 + self.index // 250}.{self.index % 250}.0/24"

    @property
    def init_pid(self) -> int:
        assert self.init is not None, f"node {self.name} is not booted"
        children = Path(f"/proc/{self.init.pid}/task/{self.init.pid}/children").read_text()
        return int(children.split()[0])

    # --- running a command inside the node ------------------------------------------------
    def enter(self, *argv: str) -> list[str]:
        """argv run in the node's mount, network and PID namespaces."""
        return ["nsenter", "-t", str(self.init_pid), "-m", "-n", "-p", "--", *argv]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.enter(*argv), capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} on {self.name} failed:\n{done.stderr}")
        return done

    def ctr(self, *args: str) -> str:
        ctr = str(self.containerd_bin / "ctr")
        return self.run(ctr, "--address", CONTAINERD_SOCKET, "-n", "k8s.io", *args).stdout

    # --- lifecycle ------------------------------------------------------------------------
    def write_config(self) -> None:
        for sub in ("containerd", "cni", "pod-logs", "sysctl"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.kubelet_dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "containerd.toml").write_text(containerd_toml(self.dir))
        (self.dir / "cni" / "10-node.conflist").write_text(cni_conflist(self.pod_cidr))
        (self.dir / "kubelet.yaml").write_text(
            kubelet_config(self.dir, ip=self.ip, cgroup_root=self.cgroup_root, ca=self.cluster.ca)
        )

    def boot(self, image_layout: Path) -> None:
        """Namespaces, network, containerd with the images, then the kubelet."""
        self.boots += 1
        (self.dir / "init.ready").unlink(missing_ok=True)
        argv = [
            *ORPHAN_KILLED, "unshare", "--pid", "--net", "--mount", "--fork", "--kill-child",
            "--mount-proc", "--", str(VENV_BIN / "python"), "-m", "testbed.kube.nodeinit",
            str(self.dir),
        ]  # fmt: skip
        self.init = Proc(f"node-{self.name}-init", argv, _env())
        wait_until(self._init_ready, timeout=START_TIMEOUT_S, what=f"node {self.name}'s init")
        join_fabric(self.fabric_pid, self.init_pid, self.index, f"{self.ip}/16")
        self.forwarder = Forwarder(self.init_pid, self.forward_ports)
        self.start_containerd()
        self.ctr("images", "import", "--local", str(image_layout))
        self.start_kubelet()

    def _init_ready(self) -> bool:
        if self.init is not None and not self.init.alive():
            raise RuntimeError(f"node {self.name}'s init exited:\n{self.init.log()[-3000:]}")
        return (self.dir / "init.ready").exists()

    def start_containerd(self) -> None:
        env = _env(PATH=f"{self.containerd_bin}:/usr/sbin:/usr/bin:/sbin:/bin")
        argv = self.enter(str(self.containerd_bin / "containerd"), "--config",
                          str(self.dir / "containerd.toml"), "--log-level", "info")  # fmt: skip
        self.containerd = Proc(f"node-{self.name}-containerd", argv, env)

        def serving() -> bool:
            if not self.containerd or not self.containerd.alive():
                raise RuntimeError(f"containerd exited:\n{self.containerd_log()[-3000:]}")
            return self.run("test", "-S", CONTAINERD_SOCKET, check=False).returncode == 0

        wait_until(serving, timeout=START_TIMEOUT_S, what=f"containerd on {self.name}")

    def start_kubelet(self) -> None:
        argv = self.enter(
            str(self.kube_bin / "kubelet"),
            f"--config={self.dir / 'kubelet.yaml'}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--root-dir={self.kubelet_dir}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.ip}",
            "--v=2",
        )
        self.kubelet = Proc(f"node-{self.name}-kubelet", argv, _env())

    def stop_kubelet(self, sig: int = signal.SIGTERM) -> None:
        if self.kubelet is not None:
            self.kubelet.kill(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.kubelet.popen.wait(15)
            self.kubelet.stop(timeout=5)

    def restart_kubelet(self) -> None:
        """The kubelet stopped and started again; containerd and the containers go on."""
        self.stop_kubelet()
        self.start_kubelet()

    def shutdown(self) -> None:
        """Every process of the node gone (the init killed: its PID namespace with it)."""
        self.stop_kubelet(signal.SIGKILL)
        if self.forwarder is not None:
            self.forwarder.close()
            self.forwarder = None
        for proc in (self.containerd, self.init):
            if proc is not None:
                proc.stop(timeout=10)
        self.containerd = self.init = None

    def reboot(self, image_layout: Path, before_boot: list | None = None) -> None:
        """Power off, then boot again: new namespaces and /run (so /var/run/cdi is empty),
        the node's disk (its kubelet and containerd directories) kept; `before_boot` runs
        in between (the tray's own reboot: a new boot id, its tmpfs emptied)."""
        self.shutdown()
        for step in before_boot or ():
            step()
        self.boot(image_layout)

    # --- reading --------------------------------------------------------------------------
    def kubelet_log(self) -> str:
        return self.kubelet.log() if self.kubelet else ""

    def containerd_log(self) -> str:
        return self.containerd.log() if self.containerd else ""

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        """What a container printed (every restart of it), from the kubelet's pod logs on
        the node's disk: what `kubectl logs` serves."""
        found = sorted((self.dir / "pod-logs").glob(f"{namespace}_{pod}_*/{container}/*.log"))
        lines = []
        for path in found:
            for line in path.read_text(errors="replace").splitlines():
                # CRI log format: "<time> <stream> <tag> <text>"
                parts = line.split(" ", 3)
                lines.append(parts[3] if len(parts) == 4 else "")
        return "\n".join(lines)

    def kubelet_metrics(self) -> str:
        """The kubelet's /metrics (its own port, on the node's IP: reached from inside the
        node's network namespace), as the admin."""
        pool = urllib3.PoolManager(cert_reqs="CERT_NONE", timeout=5.0, retries=False)
        headers = {"Authorization": f"Bearer {self.cluster.token}"}
        # The kubelet's serving certificate is the self-signed one it made for itself.
        with warnings.catch_warnings(), in_netns(self.init_pid):
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            answer = pool.request("GET", f"https://{self.ip}:10250/metrics", headers=headers)
        return str(answer.data.decode())

    def read(self, path: str) -> str:
        """A file as the node sees it (its private /run included)."""
        return self.run("cat", path).stdout


@dataclass
class NodeSet:
    """The running nodes, by name, and what booting one again needs."""

    nodes: dict[str, RealNode]
    image_layout: Path

    def __getitem__(self, name: str) -> RealNode:
        return self.nodes[name]

    def __iter__(self) -> Iterator[RealNode]:
        return iter(self.nodes.values())


def _fabric(stack: ExitStack) -> int:
    """The fabric's namespace, held by a sleeping process; its bridge made."""
    argv = [*ORPHAN_KILLED, "unshare", "--net", "--", "sleep", "infinity"]
    proc = Proc("node-fabric", argv, _env())
    stack.callback(proc.stop)
    wait_until(
        lambda: (
            Path(f"/proc/{proc.pid}/ns/net").stat().st_ino
            != Path("/proc/self/ns/net").stat().st_ino
        ),
        timeout=10,
        what="the fabric's namespace",
    )
    make_fabric_bridge(proc.pid)
    return proc.pid


@contextmanager
def real_nodes(
    cluster: Cluster, nodes: list[tuple[str, str]], workdir: Path, *, ports: list[int]
) -> Iterator[NodeSet]:
    """`nodes` ((name, ip) each) booted and Ready on `cluster`; `ports`: the host's
    loopback ports (besides the API server's) relayed into every node."""
    kube_bin, containerd_bin = kube_binaries(), containerd_binaries()
    api_port = int(cluster.url.rsplit(":", 1)[1])
    layout = write_layout(workdir / "images.tar")
    run_id = secrets.token_hex(3)
    with ExitStack() as stack:
        fabric = _fabric(stack)
        running: dict[str, RealNode] = {}
        for index, (name, ip) in enumerate(nodes, start=1):
            node = RealNode(
                name=name, ip=ip, index=index, dir=workdir / "nodes" / name, cluster=cluster,
                kube_bin=kube_bin, containerd_bin=containerd_bin,
                cgroup_root=f"dp-node-{run_id}-{index}", forward_ports=[api_port, *ports],
                fabric_pid=fabric,
            )  # fmt: skip
            make_cgroup_root(node.cgroup_root)
            stack.callback(remove_cgroup_root, node.cgroup_root)
            stack.callback(node.shutdown)
            node.write_config()
            node.boot(layout)
            running[name] = node
        yield NodeSet(running, layout)


def node_ready(kube: ClusterKube, name: str, labels: dict[str, str], timeout: float = 60) -> None:
    """The kubelet registered its Node and reports it Ready; then, as the node lifecycle
    controller would (the suite's control plane runs none), the not-ready taint the API
    server put on the new Node is lifted, and the labels GPU Feature Discovery would set are
    added."""
    core = client.CoreV1Api(kube.api)

    def ready() -> bool:
        try:
            node = core.read_node(name)
        except ApiException:
            return False
        conditions = node.status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    wait_until(ready, timeout=timeout, interval=0.2, what=f"node {name} Ready")
    core.patch_node(name, {"metadata": {"labels": labels}, "spec": {"taints": None}})
