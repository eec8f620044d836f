"""Kubernetes objects as a user or a cluster writes them, for the tests and the benchmarks:
a tray's Node labels as GPU Feature Discovery sets them, a ComputeDomain as `kubectl apply`
sends it, a pod holding a claim from a template as NVIDIA's examples write it."""

from __future__ import annotations

from typing import Any

from testbed.kube.cluster import ClusterKube

RACK_LABEL = "topology.kubernetes.io/rack"
CLUSTER = "6f0b9b84-4c1e-4a8e-9d9e-2f1f3c0d9a11"


def gpu_labels(clique: int = 1, rack: str = "r1", **extra: str) -> dict[str, str]:
    return {
        "nvidia.com/gpu.clique": f"{CLUSTER}.{clique}",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.product": "NVIDIA-GB200",
        RACK_LABEL: rack,
        **extra,
    }


def computedomain(name: str, namespace: str, num_nodes: int = 2, **channel: str) -> dict:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, **channel},
        },
    }


def pod_with_claim(name: str, namespace: str, template: str, *, node: str = "") -> dict[str, Any]:
    """A pod as NVIDIA's examples write it: a container and a claim from the template (and,
    given `node`, kept to that node by its hostname label)."""
    selector = {"nodeSelector": {"kubernetes.io/hostname": node}} if node else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**selector, **claiming_spec(template)},
    }


def claiming_spec(template: str) -> dict[str, Any]:
    """A pod spec whose one container sleeps holding a claim from `template`."""
    return {
        "containers": [
            {
                "name": "ctr",
                "image": "ubuntu:22.04",
                "command": ["sleep", "infinity"],
                "resources": {"claims": [{"name": "channel"}]},
            }
        ],
        "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
    }


def job_with_claims(
    name: str, namespace: str, template: str, pods: int, **spec: Any
) -> dict[str, Any]:
    """A Job of `pods` workers, each holding a claim from the domain's `template` and
    nothing else (no affinity, no node selector), as NVIDIA's examples and failover test
    write it; `spec` adds to the Job's spec (e.g. `backoffLimit=10`)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            **spec,
            "template": {"spec": {"restartPolicy": "Never", **claiming_spec(template)}},
        },
    }


def claim_of(kube: ClusterKube, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's generated ResourceClaim, once the resourceclaim controller made it."""
    statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
    names = [s.get("resourceClaimName") for s in statuses if s.get("resourceClaimName")]
    return kube.get("resourceclaims", names[0], pod["metadata"]["namespace"]) if names else None
