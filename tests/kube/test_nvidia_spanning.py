"""NVIDIA's multi-node example on a fabric whose NVLink cliques are smaller than its job.

NVIDIA's nvbandwidth example (a ComputeDomain of `numNodes: 4` and an MPIJob of 4 Worker
replicas, verbatim from its repository) applied unchanged, as tests/kube/test_nvidia_workloads
applies a workload, to two racks partitioned into cliques of 3 trays: no clique holds the
job, so its domain spans two, one IMEX ensemble each. The Nodes carry their trays' true
`nvidia.com/gpu.clique` labels; kube-scheduler alone puts each worker on a tray, and the
kubelet's DRA code on that Node prepares its claim. For every worker, beside what every
workload is checked for there, the tray's nodes file lists only its own clique's members and
its channel0 is backed by the channel of its own clique's ensemble (another team's domain
of one tray, running first, holds channel 1 in one of the cliques, so the two differ); the
object says which racks the domain spans. A portal that kept a domain in one clique would
never place it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from domains.computedomains.models import ComputeDomain, Phase
from domains.computedomains.selectors import domain_channels
from domains.inventory.models import Node
from domains.kube.crd import MESSAGE_ANNOTATION, RACKS_ANNOTATION
from testbed import factories
from testbed.kube.cluster import wait_for
from testbed.kube.objects import computedomain

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(47)  # this module's loopback range
NVIDIA = Path(__file__).parents[1] / "fixtures" / "nvidia"
WORKLOADS = [
    NVIDIA / "nvidia-nvbandwidth-test-job.yaml",
    Path(__file__).parent / "workloads" / "four-worker-job.yaml",
]
# Two racks whose NVLink partitions leave cliques of 3 trays: a job of 4 spans two cliques,
# over both racks.
LAYOUTS = ("3", "3")
HOLDER = ("holder", "other-team")  # a domain already running on one tray: name, namespace


@pytest.mark.parametrize("manifest", WORKLOADS, ids=[p.name for p in WORKLOADS])
def test_a_multi_node_job_larger_than_a_clique_runs_unchanged_one_ensemble_per_clique(
    manifest, real_kube, workload_run
):
    with workload_run(manifest, layouts=LAYOUTS, ip_prefix=IP_PREFIX) as run:
        for tray in run.trays:  # the labels GPU feature discovery wrote say the truth
            labels = real_kube.get("nodes", tray.hostname)["metadata"]["labels"]
            assert labels["nvidia.com/gpu.clique"] == tray.clique.label
        assert max(run.workload.jobs.values()) > 3  # more workers than a clique holds
        # Another team's domain of one tray first: its clique's channel 1 is taken, so the
        # job's two cliques get different channels, and a pod given the other clique's
        # channel would show.
        real_kube.put_namespace(HOLDER[1])
        real_kube.apply(computedomain(*HOLDER, num_nodes=1))
        holder = wait_for(
            lambda: ComputeDomain.objects.filter(name=HOLDER[0], phase=Phase.READY).first(),
            60,
            "the one-tray domain Ready",
        )

        domains, pods = run.apply()  # each pod checked on its tray, its own clique's
        (domain,) = domains.values()
        members = domain.members.filter(active=True).select_related("node", "clique__rack")
        cliques = {m.clique for m in members}
        assert len(cliques) == 2
        for member in members:  # each tray in the clique its Node's label names
            assert member.clique_id == Node.objects.get(pk=member.node_id).clique_id
        # One channel per clique, each from its own clique's ledger; the pods' channel0s
        # are backed by them (checked per pod in `run.apply()`).
        per_clique = {c.pk: domain_channels(domain, clique_id=c.pk) for c in cliques}
        assert sorted(per_clique.values()) == [[1], [2]], per_clique
        assert per_clique[holder.members.get().clique_id] == [2]

        obj = real_kube.get("computedomains", domain.name, run.namespace)
        nodes = obj["status"]["nodes"]
        assert {n["cliqueID"] for n in nodes} == {c.label for c in cliques}
        for clique in cliques:
            indexes = sorted(n["index"] for n in nodes if n["cliqueID"] == clique.label)
            assert indexes == list(range(len(indexes)))  # counted per clique, as NVIDIA's
        annotations = obj["metadata"]["annotations"]
        assert annotations[RACKS_ANNOTATION] == ",".join(sorted({c.rack.name for c in cliques}))
        assert annotations[RACKS_ANNOTATION].count(",") == 1  # both racks
        said = "all 4 members ready, in 2 cliques"
        assert annotations[MESSAGE_ANNOTATION] == ComputeDomain.objects.get(pk=domain.pk).message
        assert annotations[MESSAGE_ANNOTATION] == said

        real_kube.delete("computedomains", *HOLDER)
        run.delete(domains, pods, ended=[holder])  # `kubectl delete -f`: every tray clean
