"""NVIDIA's ComputeDomain semantics that its users (and its own tests) rely on, on upstream's
control plane with the kubelet's DRA code on every Node, the real server and Celery worker,
and node agents on emulated trays (the world of tests/kube/test_dra_e2e.py):

- the status NVIDIA's tests assert (its `test_cd_misc.bats`): a domain of `numNodes: 1` is
  NotReady before its pod exists, lists its node and is Ready while the pod runs, and is
  NotReady with no `nodes` key at all once its only pod is deleted;
- a claim whose opaque config has a field the driver does not know is refused, naming it
  (NVIDIA's unknown-field test), and nothing is made;
- a claim on a tray in no NVLink clique is prepared without a channel;
- an agent restart (killed, the portal away when it starts) never shows a busy tray as free
  in its ResourceSlice;
- a pod's claim is unprepared from the agent's own checkpoint while the portal is away, and
  the portal learns of it when it is back.

The portal is "away" for the agents only (`tests.support.relay`): their connections to it
are refused while the test itself and the portal's processes go on.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from domains.computedomains.models import DomainClaim, DomainMember, Phase
from domains.inventory.models import Node
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.slices import slice_name
from testbed import factories
from testbed.agents import wait_for
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import ClusterKube
from testbed.kube.objects import pod_with_claim
from tests.e2e.conftest import phase_of, release_domain, request_domain
from tests.kube.test_dra_e2e import (
    delete_pod,
    no_claims_left,
    node_of,
    prepared,
    refusal,
    registrations,
    run_pod,
    trays_with_kubelets,
    unschedulable,
)
from tests.support.relay import Relay

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(43)  # this module's loopback range
NAMESPACE = "e2e"


@pytest.fixture
def kube(real_kube: ClusterKube) -> ClusterKube:
    """Upstream's API server, with the chart's DeviceClass and the tenant's namespace."""
    real_kube.put_namespace(NAMESPACE)
    install_device_class(real_kube)
    return real_kube


def cd_status(kube: ClusterKube, name: str) -> dict[str, Any]:
    return dict(((kube.get("computedomains", name, NAMESPACE) or {}).get("status")) or {})


def handmade_claim(kube: ClusterKube, template: str, name: str, **parameters: Any) -> None:
    """A ResourceClaim written by hand from the domain's template, without its selector
    (so the scheduler may allocate it on any tray of the driver), `parameters` added to its
    opaque config: what NVIDIA's tests apply."""
    spec = copy.deepcopy(
        (kube.get("resourceclaimtemplates", template, NAMESPACE) or {})["spec"]["spec"]
    )
    for request in spec["devices"]["requests"]:
        request["exactly"].pop("selectors", None)
    for config in spec["devices"].get("config") or []:
        config["opaque"]["parameters"].update(parameters)
    kube.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        }
    )


def run_pod_with_claim(kube: ClusterKube, name: str, claim: str, node: str) -> str:
    pod = pod_with_claim(name, NAMESPACE, "unused", node=node)
    pod["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": claim}]
    return str(kube.apply(pod)["metadata"]["uid"])


def test_nvidias_status_unknown_field_and_no_clique_semantics_hold(
    portal, tenant_api, kube, kubelet_dirs
):
    (rack,) = factories.make_racks("3", ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    plain = nodes[2]
    # A GPU node that is not fabric-attached: no clique, and its agent's NVML says so.
    Node.objects.filter(pk=plain.pk).update(clique=None)
    with trays_with_kubelets(portal, kube, nodes, kubelet_dirs) as (fleet, kubelets):
        # NVIDIA's channel-injection example: numNodes 1, template imex-channel-0.
        domain = request_domain(
            tenant_api,
            "imex-channel-injection",
            1,
            channel={"resourceClaimTemplate": {"name": "imex-channel-0"}},
        )
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the portal formed its tray")
        wait_for(lambda: cd_status(kube, domain.name).get("status"), 20, "a status")
        # NotReady before its pod exists: no node runs its workload yet.
        assert cd_status(kube, domain.name) == {"status": "NotReady"}

        uid = run_pod(kube, "imex-channel-injection", "imex-channel-0")
        host, _ = prepared(kube, kubelets, "imex-channel-injection", uid)
        member = DomainMember.objects.select_related("node", "clique").get(
            domain=domain, active=True
        )
        wait_for(lambda: cd_status(kube, domain.name).get("status") == "Ready", 30, "Ready")
        assert cd_status(kube, domain.name)["nodes"] == [
            {
                "name": host,
                "ipAddress": member.ip_address,
                "cliqueID": member.clique.label,
                "index": 0,
                "status": "Ready",
            }
        ]

        # NVIDIA's unknown-field test, in our driver's names: refused at once, naming it (on
        # the other tray of the clique: a tray's one device is the first pod's).
        spare = next(n.hostname for n in nodes[:2] if n.hostname != host)
        handmade_claim(kube, "imex-channel-0", "rc-bad-opaque-config", unexpectedField="foo")
        bad = run_pod_with_claim(kube, "boc", "rc-bad-opaque-config", node=spare)
        error = refusal(kubelets[spare], bad, "unexpectedField", timeout=30)
        assert 'strict decoding error: unknown field "unexpectedField"' in error
        assert not DomainClaim.objects.filter(name="rc-bad-opaque-config").exists()
        assert list((fleet.tray_root(spare) / "var/run/cdi").glob("*")) == []
        delete_pod(kube, kubelets[spare], "boc", bad)
        kube.delete("resourceclaims", "rc-bad-opaque-config", NAMESPACE)

        # A claim on the tray in no clique: prepared without a channel (no CDI device), the
        # tray listed as NVIDIA lists a node that is not fabric-attached, not a member.
        handmade_claim(kube, "imex-channel-0", "rc-plain")
        plain_uid = run_pod_with_claim(kube, "plain", "rc-plain", node=plain.hostname)
        devices = wait_for(lambda: kubelets[plain.hostname].prepared(plain_uid), 30, "prepared")
        assert devices == {"ctr": []}
        assert list((fleet.tray_root(plain.hostname) / "var/run/cdi").glob("*")) == []
        assert not DomainMember.objects.filter(node=plain, active=True).exists()
        wait_for(lambda: len(cd_status(kube, domain.name).get("nodes", [])) == 2, 30, "listed")
        (listed,) = [n for n in cd_status(kube, domain.name)["nodes"] if n["index"] == -1]
        assert listed == {
            "name": plain.hostname,
            "ipAddress": plain.management_ip,
            "cliqueID": "",
            "index": -1,
            "status": "Ready",
        }
        delete_pod(kube, kubelets[plain.hostname], "plain", plain_uid)
        kube.delete("resourceclaims", "rc-plain", NAMESPACE)

        # Its only pod deleted: NotReady, and no `nodes` key at all.
        delete_pod(kube, kubelets[host], "imex-channel-injection", uid)
        wait_for(lambda: "nodes" not in cd_status(kube, domain.name), 30, "nodes gone")
        assert cd_status(kube, domain.name) == {"status": "NotReady"}
        assert phase_of(domain) == Phase.READY  # the portal still holds its formed tray

        no_claims_left(kube)
        release_domain(tenant_api, "imex-channel-injection")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")


def slice_says(kube: ClusterKube, node: str) -> tuple[str, bool] | None:
    """The tray's slice's (`domain`, `eligible`); None while it has none."""
    found = kube.get("resourceslices", slice_name(node))
    if found is None:
        return None
    (device,) = found["spec"]["devices"]
    return device["attributes"]["domain"]["string"], device["attributes"]["eligible"]["bool"]


def registered_again(kubelets: Any, node: str, before: int) -> bool:
    return registrations(kubelets[node]) > before


class SliceWatch:
    """Every state of a tray's slice seen while it runs (read every 20 ms)."""

    def __init__(self, kube: ClusterKube, node: str) -> None:
        self.kube, self.node = kube, node
        self.seen: list[tuple[str, bool] | None] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self.stop.wait(0.02):
            self.seen.append(slice_says(self.kube, self.node))

    def __enter__(self) -> SliceWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def relay(portal: str) -> Iterator[Relay]:
    with Relay(portal) as made:
        yield made


def test_an_agent_restart_with_the_portal_away_never_shows_a_busy_tray_free(
    portal, relay, tenant_api, kube, kubelet_dirs
):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX, first_rack=2)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    busy, free = nodes[0].hostname, nodes[1].hostname
    with trays_with_kubelets(relay.url, kube, nodes, kubelet_dirs) as (fleet, kubelets):
        one = request_domain(tenant_api, "one", 0)
        wait_for(lambda: kube.get("resourceclaimtemplates", "one-channel", NAMESPACE), 20, "RCT")
        uid = run_pod(kube, "one-0", "one-channel", node=busy)
        prepared(kube, kubelets, "one-0", uid)
        wait_for(lambda: phase_of(one) == Phase.READY, 60, "one Ready on its tray")
        uid_text = str(one.uid)

        before = registrations(kubelets[busy])
        with SliceWatch(kube, busy) as watch:
            fleet.kill_agents()  # a crash, an OOM kill: nothing said goodbye
            relay.cut()
            fleet.start()
            # Restarted, and the portal away: the slices say what the last desired state
            # said, and no tray may take a new member until the portal answers.
            wait_for(lambda: registered_again(kubelets, busy, before), 30, "the plugin back")
            wait_for(lambda: slice_says(kube, free) == ("", False), 30, "free, not eligible")
            time.sleep(2)  # a few of the agents' cycles with the portal away

            # Another domain's pod meanwhile: no tray takes it (the free one is not
            # eligible before the portal answered; the busy one serves the first domain).
            two = request_domain(tenant_api, "two", 0)
            template = "two-channel"
            wait_for(lambda: kube.get("resourceclaimtemplates", template, NAMESPACE), 20, "RCT")
            run_pod(kube, "two-0", template)
            wait_for(lambda: unschedulable(kube, "two-0"), 30, "two-0 waits")

            relay.heal()  # the portal answers: the free tray is eligible again
            assert node_of(kube, "two-0", timeout=60) == free
            # Never free, never eligible, never gone, from the kill to the portal's return.
            assert set(watch.seen) == {(uid_text, False)}, sorted(set(map(str, watch.seen)))
        wait_for(lambda: phase_of(two) == Phase.READY, 60, "two Ready on the free tray")
        assert phase_of(one) == Phase.READY


def test_a_pods_claim_is_unprepared_while_the_portal_is_away_and_it_learns_later(
    portal, relay, tenant_api, kube, kubelet_dirs
):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX, first_rack=3)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    first, second = nodes[0].hostname, nodes[1].hostname
    with trays_with_kubelets(relay.url, kube, nodes, kubelet_dirs) as (fleet, kubelets):
        domain = request_domain(tenant_api, "away", 0)
        wait_for(lambda: kube.get("resourceclaimtemplates", "away-channel", NAMESPACE), 20, "RCT")
        uid = run_pod(kube, "away-0", "away-channel", node=first)
        prepared(kube, kubelets, "away-0", uid)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "Ready")

        relay.cut()  # the portal away for the agents (the web, its database or Redis)
        delete_pod(kube, kubelets[first], "away-0", uid)  # unprepared all the same
        assert not list((fleet.tray_root(first) / "var/run/cdi").glob(f"{DRIVER_NAME}-*"))
        # The portal has not heard of it: it still holds the claim and the tray.
        assert DomainClaim.objects.filter(domain=domain, released_at__isnull=True).count() == 1
        # A new pod meanwhile is told why it waits.
        newcomer = run_pod(kube, "away-1", "away-channel", node=second)
        error = refusal(kubelets[second], newcomer, "the portal is away", timeout=60)
        assert f"tray {second} admits no new claim until it answers" in error

        relay.heal()  # back: the agent tells it, and the tray leaves the domain
        wait_for(
            lambda: (
                not DomainClaim.objects.filter(
                    domain=domain, node__hostname=first, released_at__isnull=True
                ).exists()
            ),
            30,
            "the portal told of the unprepare",
        )
        wait_for(
            lambda: (
                not DomainMember.objects.filter(
                    domain=domain, node__hostname=first, active=True
                ).exists()
            ),
            30,
            "the first tray out of the domain",
        )
        prepared(kube, kubelets, "away-1", newcomer, timeout=60)  # the kubelet's retry
        delete_pod(kube, kubelets[second], "away-1", newcomer)
        no_claims_left(kube)
        release_domain(tenant_api, "away")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
