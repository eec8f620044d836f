"""A real node's parts restarting under a running workload: the kubelet, the agent, the
whole node (a reboot), and the portal away while a pod goes.

The world is tests/kube/test_real_node.py's: each tray a real node (kubelet, containerd,
runc) with its agent and IMEX runner as pods; a one-tray ComputeDomain in Single mode and
a pod holding its channel, running.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from domains.computedomains.models import ComputeDomain, DomainClaim, Phase
from nodeagent.dra.kubeapi import ResourceApi
from nodeagent.dra.slices import slice_name
from testbed.emulator.tray import BOOT_ID, channel_major_for
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import ClusterKube, wait_for
from testbed.kube.nodeworld import NAMESPACE, RealWorld, trays_on_real_nodes
from testbed.kube.objects import claim_of
from tests.e2e.conftest import phase_of, request_domain
from tests.kube.test_real_node import cdi_spec_on_node, claim_uid, delete_pod, trays

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.node,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def kube(real_kube: ClusterKube) -> ClusterKube:
    real_kube.put_namespace(NAMESPACE)
    install_device_class(real_kube)
    return real_kube


@contextmanager
def busy_tray(portal: str, tenant_api: Any, kube: ClusterKube) -> Iterator[tuple[RealWorld, str]]:
    """One tray on a real node, its domain Ready and pod `w` running with channel0."""
    (tray,) = trays()
    host = tray.hostname
    with trays_on_real_nodes(portal, kube, [tray]) as world:
        domain = request_domain(tenant_api, "train", 1)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        wait_for(lambda: kube.get("resourceclaimtemplates", "train-channel", NAMESPACE), 20,
                 "template")  # fmt: skip
        world.run_pod("w", "train-channel")
        world.running("w")
        assert world.listing("w").devices() == [
            ("crw-rw-rw-", "channel0", channel_major_for(host), 0)
        ]
        yield world, host


def running_unchanged(world: RealWorld, container: str) -> bool:
    """The pod's container is the one that ran before, running, never restarted."""
    status = (world.pod("w").get("status") or {}).get("containerStatuses") or [{}]
    return (
        status[0].get("containerID") == container
        and "running" in (status[0].get("state") or {})
        and status[0].get("restartCount") == 0
    )


def test_a_kubelet_restart_leaves_the_container_running_and_its_claim_prepared(
    portal, tenant_api, kube
):
    with busy_tray(portal, tenant_api, kube) as (world, host):
        uid = claim_uid(world, "w")
        container = world.container_id("w")
        before = world.registrations(host)
        world[host].restart_kubelet()
        # The new kubelet registers the agent's plugin again, and finds the pod running.
        wait_for(lambda: world.registrations(host) > before, 60, "the plugin registered again")
        wait_for(lambda: world.pod("w")["status"].get("conditions"), 30, "the pod's status")
        assert running_unchanged(world, container)
        assert cdi_spec_on_node(world, host, uid)
        # And it can still let go of it: the pod deleted, the claim unprepared.
        delete_pod(world, "w")
        wait_for(lambda: not cdi_spec_on_node(world, host, uid), 30, "the claim unprepared")
        assert "Failed to unprepare" not in world[host].kubelet_log()


class SliceWatch:
    """Every version of the tray's ResourceSlice the API server shows while it runs,
    (event type, `domain`, `eligible`) each."""

    def __init__(self, kube: ClusterKube, host: str) -> None:
        self.api = client.CustomObjectsApi(kube.cluster.api_client())
        self.version = ResourceApi(self.api.api_client).version
        self.name = slice_name(host)
        self.seen: list[tuple[str, str, bool]] = []
        self.watch = watch.Watch()
        self.stopped = False
        self.broke_off: ProtocolError | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._follow()
        except ProtocolError as exc:  # the connection cut: by the cluster's end, after stop()
            if not self.stopped:
                self.broke_off = exc

    def _follow(self) -> None:
        stream = self.watch.stream(
            self.api.list_cluster_custom_object, "resource.k8s.io", self.version,
            "resourceslices", field_selector=f"metadata.name={self.name}",
        )  # fmt: skip
        for event in stream:
            obj = event["object"]
            (device,) = obj["spec"]["devices"]
            attrs = device.get("attributes") or device.get("basic", {}).get("attributes", {})
            domain = attrs.get("domain", {}).get("string", "")
            self.seen.append((event["type"], domain, bool(attrs.get("eligible", {}).get("bool"))))

    def stop(self) -> list[tuple[str, str, bool]]:
        """What was seen; a watch that broke off before has not seen everything."""
        self.stopped = True
        self.watch.stop()
        assert self.broke_off is None, f"the slice watch broke off: {self.broke_off}"
        return self.seen


def test_an_agent_restart_never_advertises_its_busy_tray_free(portal, tenant_api, kube):
    """The agent's pod replaced (a rolling update) while its tray serves a running pod:
    the tray's slice is never deleted and never says the tray is free and eligible, so no
    other domain's pending pod can be allocated it; the container and its claim go on."""
    with busy_tray(portal, tenant_api, kube) as (world, host):
        domain = ComputeDomain.objects.get(name="train")
        uid = claim_uid(world, "w")
        container = world.container_id("w")
        slices = SliceWatch(kube, host)
        wait_for(lambda: slices.seen, 10, "the slice watched")
        world.restart_agent(host)
        wait_for(lambda: "reported" in world.agent_log(host), 60, "the new agent reported")
        seen = slices.stop()
        assert not [t for t, _, _ in seen if t == "DELETED"], f"the slice was deleted: {seen}"
        free = [(t, d, e) for t, d, e in seen if d == "" and e]
        assert not free, f"the busy tray was advertised free: {seen}"
        assert all(d == str(domain.uid) for _, d, _ in seen), seen
        assert running_unchanged(world, container)
        assert cdi_spec_on_node(world, host, uid)
        delete_pod(world, "w")
        wait_for(lambda: not cdi_spec_on_node(world, host, uid), 30, "the claim unprepared")


def test_a_node_reboot_starts_the_pod_again_with_its_channel(portal, tenant_api, kube):
    """A reboot: every process gone, /run (so /var/run/cdi) empty, the tray's channel
    devices gone, a new boot id. The kubelet starts the pod's container again; the claim
    it had prepared before is right again (its CDI spec and channel), and the container
    lists its channel as before."""
    with busy_tray(portal, tenant_api, kube) as (world, host):
        uid = claim_uid(world, "w")
        container = world.container_id("w")
        boot_id = (world.trays / host / BOOT_ID).read_text()
        world.reboot(host)
        assert (world.trays / host / BOOT_ID).read_text() != boot_id
        wait_for(lambda: world.container_id("w") not in ("", container), 120,
                 "the pod's container started again")  # fmt: skip
        world.running("w", timeout=120)
        assert world.listing("w").devices()[-1:] == [
            ("crw-rw-rw-", "channel0", channel_major_for(host), 0)
        ]
        assert cdi_spec_on_node(world, host, uid)
        delete_pod(world, "w")
        wait_for(lambda: not cdi_spec_on_node(world, host, uid), 30, "the claim unprepared")


def test_a_pod_goes_while_the_portal_is_away_and_the_portal_learns_after(portal, tenant_api, kube):
    """The portal unreachable from the node: deleting the pod still unprepares its claim,
    from the agent's own checkpoint, so the pod's termination finishes; the portal learns
    that the claim was let go of once the node reaches it again."""
    with busy_tray(portal, tenant_api, kube) as (world, host):
        uid = claim_uid(world, "w")
        claim = claim_of(kube, world.pod("w"))
        assert claim is not None
        world.cut_portal(host)
        try:
            delete_pod(world, "w")
            wait_for(lambda: not cdi_spec_on_node(world, host, uid), 30, "the claim unprepared")
            name = claim["metadata"]["name"]
            wait_for(lambda: kube.get("resourceclaims", name, NAMESPACE) is None, 30,
                     "the claim collected")  # fmt: skip
        finally:
            world.restore_portal(host)
        live = DomainClaim.objects.filter(claim_uid=uid, released_at=None)
        wait_for(lambda: not live.exists(), 60, "the portal let go of the claim")
