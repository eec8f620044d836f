"""Workloads in the shape of NVIDIA's examples, applied as a user applies them.

Each YAML file of `tests/kube/workloads` (or of the directory `NVIDIA_WORKLOADS_DIR` names,
e.g. a copy of NVIDIA's own examples) is one test: its ComputeDomain(s) and the pods or Jobs
naming their claim templates go to upstream's kube-apiserver unchanged, in one `kubectl
apply -n` into a namespace made a moment before. From there only the product and
Kubernetes act: the real `manage.py kube_sync` adopts the ComputeDomain, the real server,
Celery worker and beat place it and publish its ResourceClaimTemplate, node agents on
emulated trays form it and publish each tray's ResourceSlice, kube-scheduler alone puts
every pod on a tray (nothing in the manifests names one), and the kubelet's own DRA code on
every Node (`KubeletFleet`) prepares its claims. The test then checks, for every pod, that
it landed on one of its domain's trays (as the portal reports them, never arranged by the
test), that its claim was allocated there, and that each of its container's CDI device ids
resolves on that tray to the domain's channel: `channel0` in Single mode (as NVIDIA's
driver gives it), every channel of the tray in All mode. `kubectl delete -f` then releases
the domains, removes their templates and leaves every tray clean.

A file without a ComputeDomain (NVIDIA's CRD, say: the cluster has it installed already)
is skipped, saying so. Kubeflow's MPI operator is not run here: for an `MPIJob` the test
takes its Worker replica's pod template and runs it as a Job of `replicas` pods
(`restartPolicy: Never`, as a Job needs, when the replica names none); the Launcher is left
out (it holds no claim, and waits for a control-plane Node).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import factories
from tests.support.workloads import delete_workload

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WORKLOADS_DIR = Path(os.environ.get("NVIDIA_WORKLOADS_DIR") or Path(__file__).parent / "workloads")
MANIFESTS = sorted([*WORKLOADS_DIR.glob("*.yaml"), *WORKLOADS_DIR.glob("*.yml")])
if not MANIFESTS:
    raise FileNotFoundError(f"no *.yaml manifests in {WORKLOADS_DIR} (NVIDIA_WORKLOADS_DIR)")

IP_PREFIX = factories.tray_ip_prefix(33)  # this module's loopback range


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_a_workload_applied_unchanged_runs_on_its_domains_trays_with_its_channels(
    manifest, workload_run
):
    with workload_run(manifest, ip_prefix=IP_PREFIX) as run:
        domains, pods = run.apply()
        run.delete(domains, pods)


@pytest.mark.parametrize("manifest", MANIFESTS[:1], ids=[p.name for p in MANIFESTS[:1]])
def test_a_workload_deleted_and_applied_again_at_once_runs_again(manifest, real_kube, workload_run):
    """`kubectl delete -f x.yaml && kubectl apply -f x.yaml`: the delete returns once the
    old ComputeDomain is gone (the portal's finalizer holds it until its domain let go of
    its trays and claim template), so the new pods' claims come from the new domain's
    template, never the old one's."""
    with workload_run(manifest, ip_prefix=IP_PREFIX) as run:
        old, old_pods = run.apply()
        delete_workload(real_kube, run.workload, old_pods)
        new, pods = run.apply(replacing=old)
        run.delete(new, pods, ended=[*old.values()])
