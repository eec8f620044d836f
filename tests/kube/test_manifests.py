"""Workload manifests and the published ComputeDomain object of a placed domain; the Job
manifest run by upstream's scheduler (`cluster`)."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml

from domains.audit.events import Actor
from domains.computedomains.models import Phase
from domains.computedomains.services import domain_request
from domains.computedomains.specs import DomainSpec
from domains.errors import InvalidTransition
from domains.kube import tasks
from domains.kube.crd import computedomain_object
from domains.kube.manifests import workload_manifests
from nodeagent.dra import DRIVER_NAME
from testbed.kube.chartobjects import install_device_class, publish_as_its_agent
from testbed.kube.cluster import wait_for
from testbed.kube.schemas import (
    assert_valid_computedomain,
    assert_valid_kubernetes,
    assert_valid_pod_template,
)
from tests.support.lifecycle import all_ready, request_and_place, run_pods

pytestmark = pytest.mark.django_db


def docs(domain) -> dict:
    return {kind: yaml.safe_load(text) for kind, text in workload_manifests(domain).items()}


def pod_templates(manifests: dict) -> list[dict]:
    mpi = manifests["mpijob"]["spec"]["mpiReplicaSpecs"]
    return [
        manifests["deployment"]["spec"]["template"],
        manifests["job"]["spec"]["template"],
        mpi["Worker"]["template"],
    ]


def test_every_manifest_is_valid_kubernetes(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    manifests = docs(domain)
    assert_valid_kubernetes(manifests["deployment"])
    assert_valid_kubernetes(manifests["job"])
    # MPIJob is a Kubeflow CRD the Kubernetes schema does not know: check its pod templates.
    for replica in manifests["mpijob"]["spec"]["mpiReplicaSpecs"].values():
        assert_valid_pod_template(replica["template"], namespace="team-a")


def test_pods_get_the_channel_and_stay_on_the_placed_trays_in_one_clique(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    members = list(domain.members.select_related("node", "clique").order_by("index"))
    hostnames = [m.node.hostname for m in members]
    manifests = docs(domain)
    assert manifests["deployment"]["spec"]["replicas"] == 3
    assert manifests["job"]["spec"]["completions"] == 3
    assert manifests["mpijob"]["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    for template in pod_templates(manifests):
        # The channel comes through DRA (the claim), never a pod annotation (see the module).
        assert "annotations" not in template["metadata"]
        affinity = template["spec"]["affinity"]
        (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        by_key = {e["key"]: e["values"] for e in term["matchExpressions"]}
        assert by_key["kubernetes.io/hostname"] == hostnames
        assert by_key["nvidia.com/gpu.clique"] == [members[0].clique.label]
        (together,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert together["topologyKey"] == "nvidia.com/gpu.clique"
        (claim,) = template["spec"]["resourceClaims"]
        assert claim["resourceClaimTemplateName"] == "train-channel"
        (container,) = template["spec"]["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
        assert container["resources"]["claims"] == [{"name": claim["name"]}]
    launcher = manifests["mpijob"]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    assert "-np" in launcher["spec"]["containers"][0]["args"]
    assert "12" in launcher["spec"]["containers"][0]["args"]


@pytest.mark.cluster
def test_kube_scheduler_puts_the_jobs_pods_on_the_placed_trays_with_their_channels(
    real_kube, cluster, topology, ns_a, tenant_a
):
    """The Job manifest applied as a user would, on a cluster of the rack's 18 trays each
    publishing its slice: the job controller makes the pods, kube-scheduler binds each to
    one of the placed trays and allocates its claim from that tray's slice."""
    install_device_class(real_kube)
    for tray in topology.nodes.select_related("clique"):
        labels = {"nvidia.com/gpu.clique": tray.clique.label}
        real_kube.put_node(tray.hostname, labels, ip=tray.management_ip)
    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    for tray in topology.nodes.select_related("clique"):
        publish_as_its_agent(cluster, tray)
    assert tasks.publish_domain(domain.pk) == "created"
    placed = {m.node.hostname for m in domain.members.select_related("node")}

    real_kube.apply(docs(domain)["job"])

    def bound() -> list[dict]:
        pods = [p.to_dict() for p in real_kube.resource("pods").get(namespace="team-a").items]
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else []

    pods = wait_for(bound, timeout=60, what="the job's 3 pods to be scheduled")
    assert {p["spec"]["nodeName"] for p in pods} == placed  # one pod on each placed tray
    for pod in pods:
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = real_kube.get("resourceclaims", status["resourceClaimName"], "team-a")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (DRIVER_NAME, pod["spec"]["nodeName"])


def test_there_are_no_manifests_before_placement(topology, ns_a, tenant_a):
    domain = domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="queued", num_nodes=2)
    )
    assert domain.phase == Phase.ADMITTED
    with pytest.raises(InvalidTransition, match="holds trays"):
        workload_manifests(domain)
    obj = computedomain_object(domain)
    assert_valid_computedomain(obj)
    assert obj["status"] == {"status": "NotReady"}  # no `nodes` at all, as NVIDIA's


def test_the_published_object_follows_nvidias_crd_and_mirrors_status(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    obj = computedomain_object(domain)
    assert_valid_computedomain(obj)
    assert obj["metadata"]["namespace"] == "team-a"
    assert obj["spec"] == {
        "numNodes": 3,
        "channel": {"resourceClaimTemplate": {"name": "train-channel"}, "allocationMode": "Single"},
    }
    # NVIDIA's status is about the workload: its trays are listed once its pods are there.
    assert obj["status"] == {"status": "NotReady"}
    trays = [m.node for m in domain.members.select_related("node").order_by("index")]
    run_pods(domain, *trays[:2])
    obj = computedomain_object(domain)
    assert obj["status"]["status"] == "NotReady"
    assert [n["status"] for n in obj["status"]["nodes"]] == ["NotReady"] * 2
    assert [n["index"] for n in obj["status"]["nodes"]] == [0, 1]

    all_ready(domain)
    domain.refresh_from_db()
    assert domain.phase == Phase.READY
    assert computedomain_object(domain)["status"]["status"] == "NotReady"  # 2 pods < numNodes 3
    run_pods(domain, trays[2])
    obj = computedomain_object(domain)
    assert_valid_computedomain(obj)
    assert obj["status"]["status"] == "Ready"
    assert obj["metadata"]["annotations"]["portal.domains/phase"] == "Ready"
    node = obj["status"]["nodes"][0]
    member = domain.members.select_related("node", "clique").get(index=0)
    assert node == {
        "name": member.node.hostname,
        "ipAddress": member.ip_address,
        "cliqueID": member.clique.label,
        "index": 0,
        "status": "Ready",
    }


def test_a_following_domains_pods_stay_in_one_clique_wherever_they_land(topology, ns_a, tenant_a):
    domain = domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="wl", num_nodes=0)
    )
    assert domain.phase == Phase.ADMITTED  # waiting for its workload: manifests already
    manifests = {k: yaml.safe_load(v) for k, v in workload_manifests(domain, replicas=12).items()}
    clique = domain.cliques.get()
    assert_valid_kubernetes(manifests["deployment"])
    assert_valid_kubernetes(manifests["job"])
    assert manifests["deployment"]["spec"]["replicas"] == 12
    for template in pod_templates(manifests):
        affinity = template["spec"]["affinity"]
        (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        # The cliques the domain keeps to, fixed when it was requested (its claim template
        # selects only their trays too): here the rack's one.
        assert term["matchExpressions"] == [
            {"key": "nvidia.com/gpu.clique", "operator": "In", "values": [clique.label]}
        ]
        (together,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert together["topologyKey"] == "nvidia.com/gpu.clique"
        (claim,) = template["spec"]["resourceClaims"]
        assert claim["resourceClaimTemplateName"] == "wl-channel"
    header = " ".join(workload_manifests(domain)["deployment"].splitlines()[:2])
    assert "follows" in header
    assert f"in clique {clique.name} (nvidia.com/gpu.clique={clique.label})" in header


def test_a_following_domain_runs_as_many_pods_as_asked_within_one_clique_and_quota(
    topology, ns_a, tenant_a
):
    from agentwire.messages import ClaimRef
    from domains.computedomains.claims import claim_admit
    from domains.errors import InvalidInput
    from domains.tenancy.models import Quota

    domain = domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="wl", num_nodes=0)
    )

    def replicas(**kw) -> int:
        return yaml.safe_load(workload_manifests(domain, **kw)["deployment"])["spec"]["replicas"]

    # Waiting for its workload: as large as one domain may be (team-a: 12 trays per domain).
    assert replicas() == 12
    assert replicas(replicas=5) == 5
    job = yaml.safe_load(workload_manifests(domain, replicas=5)["job"])["spec"]
    assert job["completions"] == job["parallelism"] == 5
    for bad in (0, 13, -3):
        with pytest.raises(InvalidInput) as err:
            workload_manifests(domain, replicas=bad)
        assert err.value.field == "replicas"
        assert "from 1 to 12" in err.value.message
        assert "the quota of namespace team-a allows 12 trays" in err.value.message
    # Without a quota: one clique of 18 trays.
    Quota.objects.filter(namespace=ns_a).update(
        max_nodes_per_domain=None, max_nodes=None, max_gpus=None
    )
    assert replicas() == 18
    limit = rf"from 1 to 18.*its clique {domain.cliques.get().name} has 18 trays"
    with pytest.raises(InvalidInput, match=limit):
        workload_manifests(domain, replicas=19)
    # Once trays have joined: as many pods as it holds.
    for i, node in enumerate(topology.nodes.order_by("slot")[:3]):
        claim = ClaimRef(uid=f"00000000-0000-0000-0000-00000000000{i}", namespace="team-a",
                         name=f"wl-{i}-channel")  # fmt: skip
        claim_admit(node=node, claim=claim, domain_uid=str(domain.uid))
    assert replicas() == 3
    # A placed domain runs one pod per placed tray: not a number to choose.
    placed = request_and_place(ns_a, tenant_a, name="placed", num_nodes=2)
    with pytest.raises(InvalidInput, match="applies only to a domain that follows its workload"):
        workload_manifests(placed, replicas=2)


def following_over_two_racks(ns_a, tenant_a):
    from domains.tenancy.models import Quota

    Quota.objects.filter(namespace=ns_a).update(
        max_nodes_per_domain=None, max_nodes=None, max_gpus=None
    )
    spec = DomainSpec(name="wide", num_nodes=0)  # no constraint: it keeps to both cliques
    domain = domain_request(actor=Actor.for_user(tenant_a), namespace=ns_a, spec=spec)
    assert domain.cliques.count() == 2
    return domain


def test_a_following_domain_over_two_cliques_runs_more_pods_than_one_holds(
    two_racks, ns_a, tenant_a
):
    """Up to its largest clique the pods must stay in one clique; beyond, up to every tray
    of its cliques, they only prefer to (as few cliques as the scheduler finds), and the
    header says each clique forms its own ensemble."""
    from domains.errors import InvalidInput
    from domains.kube.manifests import follow_replicas

    domain = following_over_two_racks(ns_a, tenant_a)
    assert follow_replicas(domain) == (18, 36, 18)  # waiting: one clique's worth by default

    def pod_affinities(replicas: int) -> list[dict]:
        manifests = {
            k: yaml.safe_load(v) for k, v in workload_manifests(domain, replicas=replicas).items()
        }
        assert_valid_kubernetes(manifests["job"])
        return [t["spec"]["affinity"]["podAffinity"] for t in pod_templates(manifests)]

    for together in pod_affinities(18):
        (required,) = together["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required["topologyKey"] == "nvidia.com/gpu.clique"
    for wide in pod_affinities(30):
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in wide
        (preferred,) = wide["preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred["weight"] == 100
        assert preferred["podAffinityTerm"]["topologyKey"] == "nvidia.com/gpu.clique"
    lines = workload_manifests(domain, replicas=30)["job"].splitlines()
    header = " ".join(line.removeprefix("# ") for line in lines if line.startswith("# "))
    assert "more than one NVLink clique holds (18)" in header
    assert "each clique forms its own IMEX ensemble" in header
    with pytest.raises(InvalidInput, match=r"from 1 to 36.*its 2 cliques have 36 trays"):
        workload_manifests(domain, replicas=37)


def test_kube_scheduler_runs_a_following_jobs_pods_over_both_cliques_when_one_is_too_small(
    real_kube, cluster, two_racks, ns_a, tenant_a
):
    """20 pods of the generated Job for a domain over two 18-tray cliques: kube-scheduler
    binds every one (none stays Pending for want of a clique), each claim allocated on its
    pod's tray, and the pods fill one clique before they take the other's trays."""
    install_device_class(real_kube)
    trays = [t for rack in two_racks for t in rack.nodes.select_related("clique")]
    for tray in trays:
        real_kube.put_node(
            tray.hostname, {"nvidia.com/gpu.clique": tray.clique.label}, ip=tray.management_ip
        )
        publish_as_its_agent(cluster, tray)
    domain = following_over_two_racks(ns_a, tenant_a)
    assert tasks.publish_domain(domain.pk) == "created"
    clique_of = {t.hostname: t.clique.label for t in trays}

    real_kube.apply(yaml.safe_load(workload_manifests(domain, replicas=20)["job"]))

    def bound() -> list[dict]:
        pods = [p.to_dict() for p in real_kube.resource("pods").get(namespace="team-a").items]
        return pods if len(pods) == 20 and all(p["spec"].get("nodeName") for p in pods) else []

    pods = wait_for(bound, timeout=90, what="the job's 20 pods to be scheduled")
    hosts = [p["spec"]["nodeName"] for p in pods]
    assert len(set(hosts)) == 20  # one pod per tray
    per_clique = sorted(Counter(clique_of[h] for h in hosts).values())
    assert per_clique == [2, 18], per_clique
    for pod in pods:
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = real_kube.get("resourceclaims", status["resourceClaimName"], "team-a")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (DRIVER_NAME, pod["spec"]["nodeName"])
