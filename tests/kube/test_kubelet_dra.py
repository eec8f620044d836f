"""A pod's channel claim prepared by the node agent through the kubelet's own DRA code.

Upstream's control plane (`cluster`), the real server and Celery worker publishing to it,
node agents on emulated trays (each a DRA kubelet plugin publishing its tray's
ResourceSlice), and `kubelet-dra`: the kubelet's plugin manager and DRA manager, built from
upstream's packages, run for one Node. kube-scheduler allocates the pod's claim; the
harness registers the agent's plugin through the registration directory and prepares the
claim as a kubelet would. A restart of the harness wipes the Node's slices, as a kubelet's
start does, and the agent publishes its slice again; after a reboot (tmpfs emptied, a new
boot id) the pod's claim is prepared again with a fresh CDI spec.
"""

from __future__ import annotations

from typing import Any

import pytest

from domains.computedomains.models import LIVE_PHASES, ComputeDomain, Phase
from domains.inventory.models import Node
from nodeagent.config import CHANNELS_DIR
from nodeagent.dra import CDI_CLAIM_KIND, DRIVER_NAME
from nodeagent.dra.slices import slice_name
from testbed import factories
from testbed.agents import AgentFleet
from testbed.kube.chartobjects import install_device_class
from testbed.kube.cluster import kube_binaries, wait_for
from testbed.kube.kubelet_dra import KubeletDra
from testbed.kube.objects import claim_of, gpu_labels, pod_with_claim
from tests.support.cdi import resolve

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(29)  # this module's loopback range
NAMESPACE = "e2e"


def pod_on(node: str, name: str, template: str) -> dict[str, Any]:
    """A pod as NVIDIA's examples write it, kept to `node` by its hostname label."""
    return pod_with_claim(name, NAMESPACE, template, node=node)


def test_the_kubelets_own_dra_code_registers_the_agent_and_gets_a_pods_claim_prepared(
    real_kube, cluster, portal, tenant_api, kubelet_dirs
):
    real_kube.put_namespace(NAMESPACE)
    install_device_class(real_kube)
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack).order_by("slot"))
    for node in nodes:
        real_kube.put_node(node.hostname, gpu_labels())
    host = nodes[0].hostname

    fleet = AgentFleet(portal, nodes, kubelet_dir=kubelet_dirs, kubeconfig=cluster.kubeconfig)
    with fleet:
        root = fleet.tray_root(host)
        kubelet = KubeletDra(
            kube_binaries(),
            kubeconfig=cluster.kubeconfig,
            node=host,
            root=kubelet_dirs / host,
            tmpfs=(root / "var/run/cdi", root / CHANNELS_DIR),
            boot_id_file=root / "proc/sys/kernel/random/boot_id",
        ).start()
        try:
            fleet.wait_joined()
            wait_for(lambda: kubelet.registered(DRIVER_NAME), 30, "the plugin to register")
            for node in nodes:
                wait_for(
                    lambda n=node: real_kube.get("resourceslices", slice_name(n.hostname)),
                    20,
                    f"{node.hostname}'s slice",
                )
            resp = tenant_api.post(
                "/computedomains/", json={"metadata": {"name": "train"}, "spec": {"numNodes": 2}}
            )
            assert resp.status_code == 201, resp.text
            domain = ComputeDomain.objects.get(
                namespace__name=NAMESPACE, name="train", phase__in=LIVE_PHASES
            )

            def ready() -> bool:
                domain.refresh_from_db()
                return domain.phase == Phase.READY

            wait_for(ready, 60, "domain Ready")
            template = domain.resource_claim_template
            wait_for(
                lambda: real_kube.get("resourceclaimtemplates", template, NAMESPACE),
                20,
                "the claim template",
            )

            pod = real_kube.apply(pod_on(host, "worker-0", template))
            uid = pod["metadata"]["uid"]
            devices = wait_for(lambda: kubelet.prepared(uid), 30, "the pod's claim prepared")
            claim = claim_of(real_kube, real_kube.get("pods", "worker-0", NAMESPACE) or {})
            assert claim is not None
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert (result["driver"], result["pool"]) == (DRIVER_NAME, host)
            claim_uid = claim["metadata"]["uid"]
            assert devices == {"ctr": [f"{CDI_CLAIM_KIND}={claim_uid}"]}
            assert kubelet.failures(uid) == []
            assert resolve([root / "var/run/cdi", root / "etc/cdi"], devices["ctr"][0])

            # A kubelet restart: its start deletes every slice of the Node (the driver's
            # too); the agent sees its slice go and publishes it again.
            before = real_kube.get("resourceslices", slice_name(host))
            assert before is not None
            kubelet.restart()

            def republished() -> dict[str, Any] | None:
                now = real_kube.get("resourceslices", slice_name(host))
                gone = now is None or now["metadata"]["uid"] != before["metadata"]["uid"]
                return now if gone and now is not None else None

            wait_for(republished, 5, "the wiped slice published again")
            # klog writes its lines out every few seconds, so the wipe's line may come late.
            wait_for(
                lambda: any(
                    '"Deleted ResourceSlices"' in line and f"spec.nodeName={host}" in line
                    for line in kubelet.log().splitlines()
                ),
                15,
                "the kubelet's log of its wipe",
            )
            wait_for(lambda: kubelet.registered(DRIVER_NAME), 30, "the plugin to register again")
            # The pod is still there. A kubelet keeps only the claim's devices in its
            # checkpoint, not that it was prepared: it calls the plugin again, and (1.34)
            # adds the answer's CDI ids to the checkpointed ones, so an id shows twice.
            again = wait_for(lambda: kubelet.prepared(uid), 30, "the claim prepared again")
            assert set(again["ctr"]) == set(devices["ctr"])

            # A reboot: tmpfs emptied, a new boot id, agent and kubelet started again.
            kubelet.stop()
            fleet.kill_agents()
            kubelet.start(reboot=True)
            assert not list((root / "var/run/cdi").glob("*"))
            fleet.start()
            fleet.wait_joined()
            after = wait_for(lambda: kubelet.prepared(uid), 60, "the claim prepared after a reboot")
            # The pod was seen before the plugin came back: refused at once, and tried again
            # only after the kubelet's pod worker backoff (10 s, jitter up to 15 s).
            refused, *_ = kubelet.attempts(uid)
            assert "is not registered" in refused["error"]
            assert kubelet.retry_gaps(uid)[0] >= 10, kubelet.events()
            assert set(after["ctr"]) == set(devices["ctr"])
            assert resolve([root / "var/run/cdi", root / "etc/cdi"], devices["ctr"][0])

            # The pod goes: its claim is unprepared through the plugin.
            real_kube.delete("pods", "worker-0", NAMESPACE)
            wait_for(
                lambda: any(
                    e["event"] == "unprepared" and e["uid"] == uid for e in kubelet.events()
                ),
                30,
                "the claim unprepared",
            )
            assert not (root / "var/run/cdi").exists() or not any(
                claim_uid in p.name for p in (root / "var/run/cdi").iterdir()
            )
        finally:
            kubelet.stop()
