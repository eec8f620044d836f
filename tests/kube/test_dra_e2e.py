"""Pods get their IMEX channel the way Kubernetes delivers devices: DRA, end to end.

Upstream's control plane (`cluster`: kube-apiserver, kube-scheduler and the resourceclaim
controller), the real server and Celery worker publishing ComputeDomains and their
ResourceClaimTemplates to it, node agents on emulated trays (each a DRA kubelet plugin
publishing its tray's ResourceSlice), and one `kubelet-dra` per tray: the kubelet's own
plugin manager and DRA manager, built from upstream's packages. The tests apply pods as a
user would: kube-scheduler alone puts each on a tray (a pod is kept to one tray by its
hostname label only where the test is about that tray), the resourceclaim controller makes
its claim from the template, and the tray's kubelet registers the agent's plugin through
the registration directory and prepares the claim, retrying a failure after the kubelet's
pod worker backoff (10-15 s). Deleting the pod unprepares it.

No fault here needs the hand-written API mock: a pod on a tray the domain does not hold
is a claim written without the template's selector, a copied template in another
namespace is applied as a user would, and a daemon that never gets ready is the
emulator's fault. (The 18-pod workload scaled to 9 is tests/kube/test_workload_scale.py.)

The last test runs the agents and each tray's IMEX runner as Kubernetes runs their pods:
each its own PID and mount namespace with its own /etc/hosts, bind-mounted as the kubelet
mounts it (testbed.processes.pod_argv). The emulated daemon resolves its peers'
names through /etc/hosts of its own namespace, as glibc does, so a running daemon meets a
new peer only if its own runner tells it to re-resolve.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from domains.audit.models import Event
from domains.computedomains.models import DomainClaim, DomainMember, Phase
from domains.inventory.models import Node
from nodeagent.config import CHANNELS_DIR, Paths
from nodeagent.dra import CDI_CLAIM_KIND, DEVICE_NAME, DRIVER_NAME
from nodeagent.dra.slices import slice_name
from nodeagent.files import read_json
from nodeagent.imex.files import HOSTS_BEGIN, MAX_NODES, UNUSED_SLOT_IP, slot_name
from nodeagent.runner import status_path
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from testbed.emulator.tray import daemon_starts
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import ClusterKube, kube_binaries
from testbed.kube.kubelet_dra import KubeletDra, KubeletFleet
from testbed.kube.objects import claim_of, gpu_labels, pod_with_claim
from testbed.processes import pods_supported
from tests.e2e.conftest import phase_of, release_domain, request_domain
from tests.support.cdi import resolve

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(21)  # this module's loopback range
NAMESPACE = "e2e"


@pytest.fixture
def kube(real_kube: ClusterKube) -> ClusterKube:
    """Upstream's API server (in this module `kube` is never conftest's API mock), with the
    chart's DeviceClass and the tenants' namespaces."""
    for name in (NAMESPACE, "intruder"):
        real_kube.put_namespace(name)
    install_device_class(real_kube)
    return real_kube


@contextlib.contextmanager
def trays_with_kubelets(
    portal: str, kube: ClusterKube, nodes: list[Node], kubelet_dirs: Path, *, pods: bool = False
) -> Iterator[tuple[AgentFleet, KubeletFleet]]:
    """The trays' Nodes, their agents (`pods`: as the chart runs them) and the kubelet of
    each, started before the agents (a kubelet's start wipes its Node's slices); entered
    once every plugin registered and every tray's slice is published."""
    kubeconfig = kube.cluster.kubeconfig
    for node in nodes:
        kube.put_node(node.hostname, gpu_labels())
    fleet = AgentFleet(portal, nodes, kubelet_dir=kubelet_dirs, kubeconfig=kubeconfig, pods=pods)
    with KubeletFleet(kube_binaries(), fleet, kubeconfig=kubeconfig) as kubelets, fleet:
        fleet.wait_joined()
        kubelets.wait_registered(DRIVER_NAME)
        for node in nodes:
            host = node.hostname
            wait_for(lambda h=host: kube.get("resourceslices", slice_name(h)), 30, f"{host} slice")
        yield fleet, kubelets


def registrations(kubelet: KubeletDra) -> int:
    """How often the kubelet's DRA handler registered the agent's plugin in this run."""
    return sum(
        '"Registered DRA plugin"' in line and f'driverName="{DRIVER_NAME}"' in line
        for line in kubelet.log().splitlines()
    )


def run_pod(
    kube: ClusterKube, name: str, template: str, *, node: str = "", namespace: str = NAMESPACE
) -> str:
    """A pod naming the claim template, as NVIDIA's examples write it; its uid."""
    pod = kube.apply(pod_with_claim(name, namespace, template, node=node))
    return str(pod["metadata"]["uid"])


def node_of(kube: ClusterKube, name: str, namespace: str = NAMESPACE, timeout: float = 30) -> str:
    """The tray kube-scheduler bound the pod to."""

    def bound() -> str | None:
        return ((kube.get("pods", name, namespace) or {}).get("spec") or {}).get("nodeName")

    return str(wait_for(bound, timeout, f"pod {name} to be scheduled"))


def unschedulable(kube: ClusterKube, name: str, namespace: str = NAMESPACE) -> bool:
    pod = kube.get("pods", name, namespace) or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


def prepared(
    kube: ClusterKube, kubelets: KubeletFleet, name: str, uid: str, timeout: float = 60
) -> tuple[str, list[str]]:
    """(the pod's tray, its container's CDI devices) once that tray's kubelet prepared it."""
    host = node_of(kube, name)
    devices = wait_for(lambda: kubelets[host].prepared(uid), timeout, f"{name}'s claim prepared")
    return host, list(devices["ctr"])


def refusal(kubelet: KubeletDra, uid: str, says: str, timeout: float = 60) -> str:
    """The first of the pod's failed prepares whose error says `says`."""

    def found() -> str | None:
        return next((e for e in kubelet.failures(uid) if says in e), None)

    return str(wait_for(found, timeout, f"a prepare refused with {says!r}"))


def delete_pod(
    kube: ClusterKube, kubelet: KubeletDra, name: str, uid: str, namespace: str = NAMESPACE
) -> None:
    """The pod goes; its claims are unprepared through the plugin."""
    kube.delete("pods", name, namespace)
    wait_for(
        lambda: any(e["event"] == "unprepared" and e["uid"] == uid for e in kubelet.events()),
        30,
        f"{name}'s claims unprepared",
    )
    assert not [e for e in kubelet.events() if e["event"] == "unprepareFailed"], kubelet.events()


def no_claims_left(kube: ClusterKube) -> None:
    """The pods' claims gone: the resourceclaim controller deallocates each once its pod is,
    and the garbage collector deletes it with its owner (the cluster runs no garbage
    collector: the test deletes a deallocated claim whose pod is gone). The domain's
    template goes on release only once no claim made from it is left."""

    def left() -> list[dict[str, Any]]:
        items = kube.resource("resourceclaims").get(namespace=NAMESPACE).to_dict()["items"]
        return [{"metadata": c["metadata"], "status": c.get("status")} for c in items]

    def collected() -> bool:
        for claim in left():
            owners = [o["name"] for o in claim["metadata"].get("ownerReferences") or []]
            orphan = all(kube.get("pods", owner, NAMESPACE) is None for owner in owners)
            if orphan and not (claim["status"] or {}).get("allocation"):
                kube.delete("resourceclaims", claim["metadata"]["name"], NAMESPACE)
        return not left()

    try:
        wait_for(collected, 30, "the pods' claims deleted")
    except TimeoutError as exc:
        raise AssertionError(f"claims left: {left()}") from exc


def cdi_device_node(fleet: AgentFleet, host: str, cdi_id: str) -> tuple[str, int]:
    """(path, minor) of the one device node the container gets from the CDI device."""
    root = fleet.tray_root(host)
    cdi = resolve([root / "var/run/cdi", root / "etc/cdi"], cdi_id)
    (node,) = cdi["containerEdits"]["deviceNodes"]
    return node["path"], node["minor"]


def test_a_placed_domains_pods_get_their_channel_and_nothing_else_gets_in(
    portal, tenant_api, kube, kubelet_dirs
):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    with trays_with_kubelets(portal, kube, nodes, kubelet_dirs) as (fleet, kubelets):
        domain = request_domain(tenant_api, "train", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        template = wait_for(
            lambda: kube.get("resourceclaimtemplates", "train-channel", NAMESPACE), 20, "template"
        )
        members = {m.node.hostname for m in DomainMember.objects.filter(domain=domain)}
        stranger = next(n.hostname for n in nodes if n.hostname not in members)
        (channel,) = domain.channels.values_list("channel", flat=True)

        # The template copied into another namespace: kube-scheduler allocates its claim on
        # one of the domain's trays, whose agent refuses it naming nothing of the domain's.
        kube.apply({**template, "metadata": {"name": "train-channel", "namespace": "intruder"}})
        spy = run_pod(kube, "spy", "train-channel", namespace="intruder")
        host = node_of(kube, "spy", "intruder")
        assert host in members
        error = refusal(kubelets[host], spy, "has no live ComputeDomain")
        assert "namespace intruder has no live ComputeDomain" in error
        assert "e2e/train" not in error
        delete_pod(kube, kubelets[host], "spy", spy, "intruder")

        # A pod kept to a tray that is not the domain's never gets that tray: the template
        # selects the domain's own. A claim written without the template's selector is
        # allocated there, and the tray's agent refuses it; nothing is made on the tray.
        run_pod(kube, "pinned", "train-channel", node=stranger)
        wait_for(lambda: unschedulable(kube, "pinned"), 30, "the pinned pod unschedulable")
        kube.delete("pods", "pinned", NAMESPACE)
        spec = copy.deepcopy(template["spec"]["spec"])
        for request in spec["devices"]["requests"]:
            request["exactly"].pop("selectors")
        kube.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "handmade", "namespace": NAMESPACE},
                "spec": spec,
            }
        )
        pod = pod_with_claim("w-x", NAMESPACE, "train-channel", node=stranger)
        pod["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": "handmade"}]
        wx = str(kube.apply(pod)["metadata"]["uid"])
        error = refusal(kubelets[stranger], wx, "is not one of the trays placed")
        assert f"tray {stranger} is not one of the trays placed" in error
        assert list((fleet.tray_root(stranger) / "var/run/cdi").glob("*")) == []
        delete_pod(kube, kubelets[stranger], "w-x", wx)
        kube.delete("resourceclaims", "handmade", NAMESPACE)

        # Two pods, no affinity: kube-scheduler puts them on the domain's two trays.
        uids = {f"w-{i}": run_pod(kube, f"w-{i}", "train-channel") for i in range(2)}
        on: dict[str, tuple[str, str]] = {}  # host -> (pod, uid)
        for name, uid in uids.items():
            host, devices = prepared(kube, kubelets, name, uid)
            on[host] = (name, uid)
            claim = claim_of(kube, kube.get("pods", name, NAMESPACE) or {})
            assert claim is not None
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert (result["pool"], result["device"]) == (host, DEVICE_NAME)
            assert result["request"] == "channel"
            assert devices == [f"{CDI_CLAIM_KIND}={claim['metadata']['uid']}"]
            # Single mode: the container sees channel0, as with NVIDIA's driver.
            assert cdi_device_node(fleet, host, devices[0]) == (f"/{CHANNELS_DIR}/channel0", 0)
            assert (fleet.tray_root(host) / CHANNELS_DIR / f"channel{channel}").exists()
            assert kubelets[host].failures(uid) == []
        assert set(on) == members

        # The agent killed between prepare and unprepare: its checkpoint remembers.
        before = {host: registrations(kubelets[host]) for host in on}
        fleet.kill_agents()
        fleet.start()
        fleet.wait_joined()
        for host, (name, uid) in on.items():
            wait_for(lambda h=host: registrations(kubelets[h]) > before[h], 30, "re-registered")
            delete_pod(kube, kubelets[host], name, uid)
            assert not list((fleet.tray_root(host) / "var/run/cdi").glob(f"{DRIVER_NAME}-*"))
        wait_for(
            lambda: (
                not DomainClaim.objects.filter(domain=domain, released_at__isnull=True).exists()
            ),
            30,
            "the claims released",
        )
        assert DomainClaim.objects.filter(domain=domain).count() == 2

        no_claims_left(kube)
        release_domain(tenant_api, "train")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        wait_for(
            lambda: kube.get("resourceclaimtemplates", "train-channel", NAMESPACE) is None,
            20,
            "template gone",
        )
        # The object goes after its template: its finalizer is lifted once that is gone.
        wait_for(
            lambda: kube.get("computedomains", "train", NAMESPACE) is None, 20, "the object gone"
        )


def test_a_joiner_whose_daemon_never_gets_ready_is_dropped_and_the_rest_form(
    portal, tenant_api, kube, kubelet_dirs
):
    """One of three trays is unkind (its nvidia-imex hangs while it initialises). Its
    pod's prepare says the daemon is not ready, and the kubelet tries again after its
    backoff. At the formation deadline (the controller's pass, run here as the beat would)
    that tray alone leaves; its pod's next prepare says what to do; the two others form
    without restarting."""
    from datetime import timedelta

    from django.utils import timezone

    from domains.computedomains.reconcile import reconcile

    (rack,) = factories.make_racks("3", ip_prefix=IP_PREFIX, first_rack=3)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    hosts = [n.hostname for n in nodes]
    stuck, good = hosts[2], hosts[:2]
    with trays_with_kubelets(portal, kube, nodes, kubelet_dirs) as (fleet, kubelets):
        fleet.set_faults(stuck, start_delay_s=3600)
        domain = request_domain(tenant_api, "stuck", 0)
        wait_for(lambda: kube.get("resourceclaimtemplates", "stuck-channel", NAMESPACE), 20, "RCT")
        uids = {f"s-{i}": run_pod(kube, f"s-{i}", "stuck-channel") for i in range(3)}
        on = {node_of(kube, name): (name, uid) for name, uid in uids.items()}
        assert sorted(on) == hosts
        for host in good:
            assert prepared(kube, kubelets, *on[host])[0] == host
        wait_for(
            lambda: domain.members.filter(active=True, daemon_state="READY").count() == 2,
            30,
            "the two good daemons READY (waiting for the third)",
        )
        stuck_uid = on[stuck][1]
        # The agent keeps trying within the kubelet's call (40 s), then answers "not yet".
        first = refusal(kubelets[stuck], stuck_uid, "is not ready", timeout=60)
        assert "is not ready for ComputeDomain e2e/stuck yet" in first
        assert phase_of(domain) == Phase.FORMING

        assert reconcile(now=timezone.now() + timedelta(hours=1))["deadline"] == 1
        error = refusal(kubelets[stuck], stuck_uid, "was dropped", timeout=60)
        assert f"tray {stuck} was dropped from ComputeDomain e2e/stuck" in error
        assert "Delete this pod" in error
        assert kubelets[stuck].prepared(stuck_uid) is None
        wait_for(lambda: fleet.leftovers(stuck) == [], 30, "the dropped tray clean")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the two form without it")
        assert [daemon_starts(fleet.tray_root(h)) for h in good] == [1, 1]

        for host, (name, uid) in on.items():
            delete_pod(kube, kubelets[host], name, uid)
        no_claims_left(kube)
        release_domain(tenant_api, "stuck")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "domain Released")


def names_in(hosts: str) -> list[str]:
    """The names of the block that point at a member (the others point nowhere)."""
    lines = [line.split() for line in hosts.splitlines() if "\tportal-imex-" in line]
    assert len(lines) in (0, MAX_NODES), "every name of the nodes file resolves here"
    return sorted(name for ip, name in lines if ip != UNUSED_SLOT_IP)


def resolved(fleet: AgentFleet, host: str) -> int:
    return int((read_json(status_path(Paths(fleet.tray_root(host)))) or {}).get("resolved", 0))


@pytest.mark.skipif(not pods_supported(), reason="pods need root and util-linux's unshare")
def test_a_peer_change_on_a_running_domain_reaches_the_daemons_only_through_their_runners(
    portal, tenant_api, kube, kubelet_dirs
):
    """The seeds' way, with agents and runners in pods of their own: a numNodes 0
    ComputeDomain reserves nothing and forms from its pods' claims, only if each runner
    writes its own pod's hosts file; a running daemon meets a new peer only if its own
    runner tells it to re-resolve (an agent writing a hosts file of its own, or signalling a
    pid of its namespace, reaches no daemon); a pod that goes lets its tray leave without
    restarting the others; when the workload and the ComputeDomain are deleted nothing is
    left. Each pod is kept to the tray the test is about. (An 18-pod Job scaled to 9 is
    tests/kube/test_workload_scale.py.)"""
    (rack,) = factories.make_racks("3", ip_prefix=IP_PREFIX, first_rack=4)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    hosts = [n.hostname for n in nodes]
    first, joiner = hosts[:2], hosts[2]
    with trays_with_kubelets(portal, kube, nodes, kubelet_dirs, pods=True) as (fleet, kubelets):
        domain = request_domain(tenant_api, "pods", 0)
        assert phase_of(domain) == Phase.ADMITTED and domain.reason == "WaitingForWorkload"
        wait_for(lambda: kube.get("resourceclaimtemplates", "pods-channel", NAMESPACE), 20, "RCT")
        assert not domain.members.exists()
        on = {
            host: (f"p-{i}", run_pod(kube, f"p-{i}", "pods-channel", node=host))
            for i, host in enumerate(first)
        }

        # Two pods: two trays, each daemon started by its runner with both names.
        for host in first:
            assert prepared(kube, kubelets, *on[host])[0] == host
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "a domain of two")
        pids = {host: fleet.daemon_pid(host) for host in first}
        domain.refresh_from_db()
        token = domain.imex_name_token  # the domain's own names: no other domain lists them
        assert token
        for host in first:
            assert names_in(fleet.runner_hosts(host)) == [slot_name(i, token) for i in (0, 1)]
            assert fleet.runner_hosts(host).startswith("# Kubernetes-managed hosts file")
            assert not (fleet.tray_root(host) / "etc/hosts").exists()  # nobody's /etc/hosts
        assert HOSTS_BEGIN not in fleet.pod_hosts(fleet.name).read_text()  # the agents' pod
        nodes_file = fleet.nodes_file(first[0])
        assert nodes_file == "".join(f"{slot_name(i, token)}\n" for i in range(MAX_NODES))

        # A third pod: a new peer for two running daemons, which only their runners reach.
        on[joiner] = ("p-2", run_pod(kube, "p-2", "pods-channel", node=joiner))
        assert prepared(kube, kubelets, *on[joiner])[0] == joiner
        wait_for(lambda: domain.members.filter(active=True).count() == 3, 30, "three members")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "one domain of three")
        for host in first:
            assert names_in(fleet.runner_hosts(host)) == [slot_name(i, token) for i in range(3)]
            assert daemon_starts(fleet.tray_root(host)) == 1  # re-resolved, never restarted
            assert fleet.daemon_pid(host) == pids[host]
            assert resolved(fleet, host) >= 1
            assert "told to re-resolve" in fleet.runners[host].log()
            assert "looked up in DNS" not in fleet.runners[host].log()  # every name mapped
            assert fleet.nodes_file(host) == nodes_file  # stable names; only hosts changed
        assert resolved(fleet, joiner) == 0  # it read every name at its start

        # The third pod goes: its tray leaves, the two stay as they are, and re-resolve its
        # name, now pointing nowhere (NVIDIA's daemons are told on a leave too: another
        # domain's tray may get that address next).
        before = {host: resolved(fleet, host) for host in first}
        delete_pod(kube, kubelets[joiner], *on[joiner])
        wait_for(lambda: domain.members.filter(active=True).count() == 2, 30, "two members")
        wait_for(lambda: fleet.leftovers(joiner) == [], 30, "the leaver clean")
        wait_for(lambda: HOSTS_BEGIN not in fleet.runner_hosts(joiner), 10, "its names gone")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the two still one domain")
        assert {h: fleet.daemon_pid(h) for h in first} == pids
        assert all(fleet.nodes_file(h) == nodes_file for h in first)
        two = [slot_name(i, token) for i in (0, 1)]
        for host in first:
            wait_for(lambda h=host: names_in(fleet.runner_hosts(h)) == two, 20, "its name gone")
            wait_for(lambda h=host: resolved(fleet, h) > before[h], 20, "a SIGUSR1 on the leave")
        events = [e.verb for e in Event.objects.filter(domain=domain)]
        assert events.count("member.joined") == 3 and events.count("member.left") == 1

        # The workload and the ComputeDomain are deleted: everything goes.
        for host in first:
            delete_pod(kube, kubelets[host], *on[host])
        wait_for(lambda: phase_of(domain) == Phase.ADMITTED, 30, "waiting for workload again")
        no_claims_left(kube)
        release_domain(tenant_api, "pods")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        wait_for(
            lambda: kube.get("resourceclaimtemplates", "pods-channel", NAMESPACE) is None,
            20,
            "template gone",
        )
        assert kube.get("computedomains", "pods", NAMESPACE) is None
        for host in hosts:
            wait_for(lambda h=host: fleet.leftovers(h) == [], 30, "trays clean")
            wait_for(lambda h=host: HOSTS_BEGIN not in fleet.runner_hosts(h), 10, "names gone")
            assert list((fleet.tray_root(host) / "var/run/cdi").glob("*.json")) == []
