"""Emulated trays on real nodes: each tray a real kubelet with containerd
(testbed.kube.node), running the tray's agent and IMEX runner as pods
(testbed.kube.nodepods), joined to the real portal and the suite's control plane.

    with trays_on_real_nodes(portal, kube, nodes) as world:
        world.run_pod("w-0", "train-channel")
        world.listing("w-0")          # what the container lists in /dev/nvidia-caps-imex-…
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domains.inventory.models import Node
from nodeagent.dra.slices import slice_name
from testbed.agents import JOIN_TOKEN, ensure_join_token
from testbed.emulator.tray import reboot_tray
from testbed.fleetspec import fleet_spec
from testbed.kube.cluster import ClusterKube, wait_for
from testbed.kube.node import NodeSet, RealNode, node_ready, real_nodes
from testbed.kube.nodepods import AGENTS_NAMESPACE, agent_pod, channel_pod, runner_pod
from testbed.kube.objects import gpu_labels

NAMESPACE = "e2e"


@dataclass
class Listing:
    """What a workload container printed about its channel devices."""

    count: int
    lines: list[str]

    def devices(self) -> list[tuple[str, str, int, int]]:
        """(mode, name, major, minor) of each device listed (`ls -ln`: `crw-rw-rw- 1 0 0
        235, 0 <date> channel0`)."""
        found = []
        for line in self.lines:
            words = line.split()
            found.append((words[0], words[-1], int(words[4].rstrip(",")), int(words[5])))
        return found


@dataclass
class RealWorld:
    kube: ClusterKube
    nodes: NodeSet
    portal: str
    workdir: Path
    namespace: str = NAMESPACE  # the workload pods'

    @property
    def trays(self) -> Path:
        return self.workdir / "trays"

    @property
    def spec(self) -> Path:
        return self.trays / "fleet.json"

    def __getitem__(self, host: str) -> RealNode:
        return self.nodes[host]

    # --- the tray's pods --------------------------------------------------------------------
    def agent_pod(self, host: str) -> dict[str, Any]:
        node = self.nodes[host]
        return agent_pod(
            host, portal=self.portal, join_token=JOIN_TOKEN, spec=self.spec, trays=self.trays,
            kubelet_dirs=node.kubelet_dir.parent, kubeconfig=self.kube.cluster.kubeconfig,
        )  # fmt: skip

    def start_tray_pods(self, host: str) -> None:
        self.kube.apply(runner_pod(host, trays=self.trays))
        self.kube.apply(self.agent_pod(host))

    def restart_agent(self, host: str) -> None:
        """The agent's pod deleted (SIGTERM: the agent exits as in a rolling update) and
        made again, as the DaemonSet controller would; returns once it runs."""
        name = f"agent-{host}"
        self.kube.resource("pods").delete(name=name, namespace=AGENTS_NAMESPACE)
        wait_for(lambda: self.kube.get("pods", name, AGENTS_NAMESPACE) is None, 60,
                 f"{name} gone")  # fmt: skip
        self.kube.apply(self.agent_pod(host))
        self.running(name, AGENTS_NAMESPACE)

    def agent_log(self, host: str) -> str:
        return self.nodes[host].container_log(AGENTS_NAMESPACE, f"agent-{host}", "agent")

    def registrations(self, host: str) -> int:
        """How often the kubelet registered the tray's DRA plugin, by the agents' logs."""
        return self.agent_log(host).count("registered with the kubelet as DRA driver")

    def cut_portal(self, host: str) -> None:
        """The portal unreachable from the node (its port closed there), until `restore`."""
        forwarder = self.nodes[host].forwarder
        assert forwarder is not None
        forwarder.cut(self.portal_port)

    def restore_portal(self, host: str) -> None:
        forwarder = self.nodes[host].forwarder
        assert forwarder is not None
        forwarder.restore(self.portal_port)

    @property
    def portal_port(self) -> int:
        return int(self.portal.rsplit(":", 1)[1])

    def wait_published(self, host: str, timeout: float = 90) -> dict[str, Any]:
        """The tray's agent published its ResourceSlice (it registered and joined)."""
        try:
            return wait_for(lambda: self.kube.get("resourceslices", slice_name(host)), timeout,
                            f"{host}'s slice")  # fmt: skip
        except TimeoutError as exc:
            raise AssertionError(f"{host}'s agent published no slice:\n{self.story(host)}") from exc

    def story(self, host: str) -> str:
        """The tray's pods' states and logs, and the end of its kubelet's log."""
        node = self.nodes[host]
        parts = []
        for pod, ctr in ((f"agent-{host}", "agent"), (f"imex-runner-{host}", "imex-runner")):
            status = (self.pod(pod, AGENTS_NAMESPACE).get("status") or {}).get("containerStatuses")
            parts.append(f"--- {pod}: {json.dumps(status, default=str)[:1500]}")
            parts.append(node.container_log(AGENTS_NAMESPACE, pod, ctr)[-3000:])
        parts.append(f"--- kubelet\n{node.kubelet_log()[-3000:]}")
        return "\n".join(parts)

    def pod(self, name: str, namespace: str = "") -> dict[str, Any]:
        return self.kube.get("pods", name, namespace or self.namespace) or {}

    def container_id(self, name: str, namespace: str = "") -> str:
        statuses = (self.pod(name, namespace).get("status") or {}).get("containerStatuses") or []
        return str(statuses[0].get("containerID") or "") if statuses else ""

    def running(self, name: str, namespace: str = "", timeout: float = 90) -> str:
        """The pod's container is running; its node."""

        def started() -> bool:
            status = self.pod(name, namespace).get("status") or {}
            states = [s.get("state") or {} for s in status.get("containerStatuses") or []]
            return bool(states) and all("running" in s for s in states)

        try:
            wait_for(started, timeout, f"pod {name} running")
        except TimeoutError as exc:
            status = json.dumps(self.pod(name, namespace).get("status"), indent=1, default=str)
            raise AssertionError(f"pod {name} did not start:\n{status}") from exc
        return str(self.pod(name, namespace)["spec"]["nodeName"])

    def run_pod(self, name: str, template: str, *, node: str = "") -> str:
        """A workload pod holding a claim from `template`; its uid."""
        pod = self.kube.apply(channel_pod(name, self.namespace, template, node=node))
        return str(pod["metadata"]["uid"])

    def listing(self, name: str, namespace: str = "", timeout: float = 30) -> Listing:
        """What the pod's container listed about its channel devices (from its log)."""
        namespace = namespace or self.namespace
        host = str(self.pod(name, namespace)["spec"]["nodeName"])

        def listed() -> str | None:
            text = self.nodes[host].container_log(namespace, name, "ctr")
            return text if "listed" in text else None

        text = str(wait_for(listed, timeout, f"{name}'s listing"))
        lines = text.split("listed")[0].strip().splitlines()
        count = int(lines[0].split()[1])
        return Listing(count, lines[1:])

    def reboot(self, host: str) -> None:
        """The node powered off and on: every process and /run gone; the tray's own
        reboot (a new boot id, its /dev tmpfs emptied) in between; its pods started again
        by the new kubelet."""
        self.nodes[host].reboot(self.nodes.image_layout, [lambda: reboot_tray(self.trays / host)])
        node_ready(self.kube, host, gpu_labels())


@contextlib.contextmanager
def trays_on_real_nodes(
    portal: str, kube: ClusterKube, nodes: list[Node], namespace: str = NAMESPACE
) -> Iterator[RealWorld]:
    """The trays booted as real nodes (Ready, labelled as GPU Feature Discovery would),
    each with its agent and runner pods; entered once every tray's slice is published."""
    ensure_join_token()
    kube.put_namespace(AGENTS_NAMESPACE)
    workdir = Path(tempfile.mkdtemp(prefix="kn-"))  # short: unix sockets hold 107 bytes
    try:
        world_nodes = [(n.hostname, str(n.management_ip)) for n in nodes]
        port = int(portal.rsplit(":", 1)[1])
        with real_nodes(kube.cluster, world_nodes, workdir, ports=[port]) as running:
            world = RealWorld(kube, running, portal, workdir, namespace)
            world.trays.mkdir(parents=True, exist_ok=True)
            world.spec.write_text(json.dumps(fleet_spec(nodes)))
            for node in nodes:
                node_ready(kube, node.hostname, gpu_labels())
                world.start_tray_pods(node.hostname)
            for node in nodes:
                world.wait_published(node.hostname)
            try:
                yield world
            except BaseException:
                for node in nodes:  # shown with the failure (pytest's captured stdout)
                    print(world.story(node.hostname))
                raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
