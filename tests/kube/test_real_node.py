"""Pods that really start with their IMEX channel: real nodes, end to end.

Each tray is a real node (testbed.kube.node): upstream's kubelet with containerd and runc,
in namespaces of its own, on the suite's control plane. The tray's agent and IMEX runner
run on it as pods, as the chart's DaemonSets run them (testbed.kube.nodepods); the real
server and Celery worker publish ComputeDomains and their claim templates. A workload pod
is applied as a user would; kube-scheduler places it, the resourceclaim controller makes
its claim, the kubelet asks the agent to prepare it, containerd resolves the CDI device the
agent named and runc makes the device node in the container, which lists what it sees.
What is emulated: the IMEX daemon and the GPUs (the tray's root, its /proc/devices major
and NVML).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from domains.computedomains.models import DomainClaim, Phase
from domains.inventory.models import Node
from nodeagent.config import CHANNELS_DIR, Paths
from nodeagent.dra import DRIVER_NAME
from testbed import factories
from testbed.emulator.tray import channel_major_for
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import ClusterKube, wait_for
from testbed.kube.node import node_ready, real_nodes
from testbed.kube.nodeimage import BUSYBOX
from testbed.kube.nodeinit import KUBELET_SYSCTLS
from testbed.kube.nodeworld import NAMESPACE, RealWorld, trays_on_real_nodes
from testbed.kube.objects import claim_of
from tests.e2e.conftest import phase_of, request_domain

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.node,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

# The nodes' IPs exist only in the namespaces their fixture makes.
IP_PREFIX = f"10.{factories.TRAY_IP_BASE}"


@pytest.fixture
def kube(real_kube: ClusterKube) -> ClusterKube:
    real_kube.put_namespace(NAMESPACE)
    install_device_class(real_kube)
    return real_kube


def trays(layout: str = "1") -> list[Node]:
    (rack,) = factories.make_racks(layout, ip_prefix=IP_PREFIX)
    return list(Node.objects.filter(rack=rack).order_by("slot"))


def claim_uid(world: RealWorld, pod: str) -> str:
    claim = wait_for(lambda: claim_of(world.kube, world.pod(pod)), 30, f"{pod}'s claim")
    return str(claim["metadata"]["uid"])


def cdi_spec_on_node(world: RealWorld, host: str, uid: str) -> bool:
    """Whether the claim's CDI spec is in the node's /var/run/cdi (the node's own tmpfs)."""
    done = world[host].run("test", "-e", f"/var/run/cdi/{DRIVER_NAME}-{uid}.json", check=False)
    return done.returncode == 0


def delete_pod(world: RealWorld, name: str) -> None:
    world.kube.resource("pods").delete(name=name, namespace=NAMESPACE)
    wait_for(lambda: world.kube.get("pods", name, NAMESPACE) is None, 60, f"{name} gone")


def let_go(world: RealWorld, host: str, pod: str, uid: str) -> None:
    """The pod deleted: the kubelet unprepares its claim (the agent removes its CDI spec),
    the garbage collector deletes the claim (its owner is gone), the portal lets go of it."""
    claim = claim_of(world.kube, world.pod(pod))
    assert claim is not None
    delete_pod(world, pod)
    wait_for(lambda: not cdi_spec_on_node(world, host, uid), 30, "the claim unprepared")
    name = claim["metadata"]["name"]
    wait_for(lambda: world.kube.get("resourceclaims", name, NAMESPACE) is None, 30,
             "the claim collected")  # fmt: skip
    live = DomainClaim.objects.filter(claim_uid=uid, released_at=None)
    wait_for(lambda: not live.exists(), 30, "the portal let go of the claim")


def test_pods_start_with_exactly_their_channel_whatever_their_claims_uid(portal, tenant_api, kube):
    """Single mode: the container gets channel0, a char device of the tray's major, mode
    0666, for claims whose uid starts with a digit (CDI 0.5.0) or a letter alike; a deleted
    pod's claim goes through the garbage collector and the agent unprepares it."""
    (tray,) = trays()
    host = tray.hostname
    major = channel_major_for(host)
    with trays_on_real_nodes(portal, kube, [tray]) as world:
        domain = request_domain(tenant_api, "train", 1)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        wait_for(lambda: kube.get("resourceclaimtemplates", "train-channel", NAMESPACE), 20,
                 "template")  # fmt: skip
        kinds: set[bool] = set()  # whether a claim uid that worked starts with a digit
        for i in range(12):
            name = f"w-{i}"
            world.run_pod(name, "train-channel")
            uid = claim_uid(world, name)
            assert world.running(name) == host
            listing = world.listing(name)
            assert listing.count == 1
            assert listing.devices() == [("crw-rw-rw-", "channel0", major, 0)]
            assert cdi_spec_on_node(world, host, uid)
            kinds.add(uid[0].isdigit())
            # The tray's one device is the claim's until the pod goes.
            let_go(world, host, name, uid)
            if len(kinds) == 2:
                break
        assert kinds == {True, False}, "no claim uid of both kinds in 12 pods"


def test_an_all_mode_pod_sees_every_channel_of_its_tray(portal, tenant_api, kube):
    """All mode: the container gets every channel the tray made for the domain, each with
    its own minor, as the agent made them on the tray."""
    (tray,) = trays()
    host = tray.hostname
    major = channel_major_for(host)
    with trays_on_real_nodes(portal, kube, [tray]) as world:
        channel = {"resourceClaimTemplate": {"name": "wide-channel"}, "allocationMode": "All"}
        domain = request_domain(tenant_api, "wide", 1, channel=channel)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        wait_for(lambda: kube.get("resourceclaimtemplates", "wide-channel", NAMESPACE), 20,
                 "template")  # fmt: skip
        world.run_pod("all", "wide-channel")
        assert world.running("all") == host
        on_tray = sorted(
            int(p.name.removeprefix("channel"))
            for p in (world.trays / host / CHANNELS_DIR).iterdir()
        )
        assert on_tray[-1] == 2047
        listing = world.listing("all")
        assert listing.count == len(on_tray)
        # the first four, in `ls` order (channel0, channel1, channel10, channel100 …)
        first = sorted((f"channel{n}" for n in on_tray), key=str)[:4]
        assert [d[1] for d in listing.devices()] == first
        for mode, name, got_major, minor in listing.devices():
            assert (mode, got_major, minor) == ("crw-rw-rw-", major, int(name[7:]))


def test_the_imex_daemon_runs_in_the_runner_pod_with_its_own_hosts_file(portal, tenant_api, kube):
    """The runner pod is the daemon's parent: the daemon resolves names through the
    runner pod's /etc/hosts (the kubelet's per-pod copy), not the agent's or the node's."""
    (tray,) = trays()
    host = tray.hostname
    with trays_on_real_nodes(portal, kube, [tray]) as world:
        domain = request_domain(tenant_api, "hosts", 1)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        daemon = wait_for(lambda: imex_daemon(world.trays / host), 30, "the daemon")
        runner = world.pod(f"imex-runner-{host}", "gpu-portal")
        agent = world.pod(f"agent-{host}", "gpu-portal")
        pods = world[host].kubelet_dir / "pods"
        runner_hosts = pods / runner["metadata"]["uid"] / "etc-hosts"
        agent_hosts = pods / agent["metadata"]["uid"] / "etc-hosts"
        seen = os.stat(f"/proc/{daemon}/root/etc/hosts")
        assert (seen.st_dev, seen.st_ino) == (
            runner_hosts.stat().st_dev,
            runner_hosts.stat().st_ino,
        )
        assert seen.st_ino != agent_hosts.stat().st_ino


def imex_daemon(tray_root: Path) -> int | None:
    """The host pid of the tray's emulated nvidia-imex (its command line names its config
    under the tray's root)."""
    config = str(Paths(tray_root).imex_config)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"imex.py") for a in argv) and config.encode() in argv:
            return int(entry.name)
    return None


def test_a_node_leaves_nothing_behind_on_the_machine(cluster, tmp_path):
    """A node booted, a plain pod run on it, the node gone: no process, cgroup, network
    link or mount of it is left, and the host-wide sysctls the kubelet sets are untouched."""
    sysctls = {key: (Path("/proc/sys") / key).read_text() for key in KUBELET_SYSCTLS}
    links = host_links()
    kube = ClusterKube(cluster)
    workdir = Path(tempfile.mkdtemp(prefix="kn-"))
    try:
        with real_nodes(cluster, [("plain", f"{IP_PREFIX}.250.1")], workdir, ports=[]) as nodes:
            node_ready(kube, "plain", {})
            root = nodes["plain"].cgroup_root
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "plain", "namespace": "default"},
                "spec": {"nodeName": "plain", "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                         "command": ["sh", "-c", "echo hello; exec sleep 600"]}]},
            }  # fmt: skip
            kube.apply(pod)
            wait_for(lambda: "hello" in nodes["plain"].container_log("default", "plain", "c"),
                     60, "the pod's output")  # fmt: skip
            assert (Path("/proc/sys/kernel/panic").read_text()) == sysctls["kernel/panic"]
    finally:
        kube.delete("pods", "plain", "default")
        kube.delete("nodes", "plain")
        shutil.rmtree(workdir, ignore_errors=True)
    assert {key: (Path("/proc/sys") / key).read_text() for key in KUBELET_SYSCTLS} == sysctls
    assert host_links() == links
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{root}"))
    assert str(workdir) not in Path("/proc/self/mountinfo").read_text()
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and mentions(p, workdir)]
    assert not left


def host_links() -> str:
    """This machine's own network interfaces (names and kinds)."""
    done = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return "\n".join(sorted(line.split(":")[1].strip() for line in done.stdout.splitlines()))


def mentions(proc: Path, workdir: Path) -> bool:
    try:
        return str(workdir).encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False
