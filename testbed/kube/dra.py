"""The cluster's side of bench/dra.py's stand-in mode: what the control plane and the
scheduler do with a pod that names a domain's ResourceClaimTemplate, written into the
Kubernetes API mock. Tests use upstream's control plane instead (tests/kube: kube-scheduler
allocates, the resourceclaim controller makes claims from templates); this stays as the
stand-in baseline the benchmark compares them with.

    claim = allocate(kube, namespace="e2e", template="train-channel", pod="w-0", node=host)

makes the pod's ResourceClaim from the template (its spec and its `spec.metadata` labels, as
the resourceclaim controller does) and allocates it the way the scheduler would: to the
device of the node's published ResourceSlice, with the template's opaque config copied
into `status.allocation.devices.config` (`source: FromClaim`). `PodClaim` is what the
kubelet then hands the node's plugin.
"""

from __future__ import annotations

from typing import Any

from nodeagent.dra import DRIVER_NAME
from testbed.kube.kubelet import PodClaim
from testbed.kube.kubemock import KubeMock
from testbed.kube.schemas import assert_valid_dra


def published_slice(kube: KubeMock, node: str) -> dict[str, Any] | None:
    return kube.get("resourceslices", f"{node}-{DRIVER_NAME}")


def allocate(
    kube: KubeMock,
    *,
    namespace: str,
    template: str,
    pod: str,
    node: str,
    template_namespace: str | None = None,
) -> PodClaim:
    """The pod's claim, created from the template and allocated on `node`."""
    source = kube.get("resourceclaimtemplates", template, template_namespace or namespace)
    assert source is not None, f"no ResourceClaimTemplate {template}"
    slice_ = published_slice(kube, node)
    assert slice_ is not None, f"node {node} published no ResourceSlice"
    spec = source["spec"]
    devices = spec["spec"]["devices"]
    claim = kube.apply(
        {
            "apiVersion": source["apiVersion"],
            "kind": "ResourceClaim",
            "metadata": {
                "name": f"{pod}-channel",
                "namespace": namespace,
                "labels": spec.get("metadata", {}).get("labels", {}),
                "annotations": {"resource.kubernetes.io/pod-claim-name": "channel"},
            },
            "spec": spec["spec"],
        }
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": devices["requests"][0]["name"],
                        "driver": slice_["spec"]["driver"],
                        "pool": slice_["spec"]["pool"]["name"],
                        "device": slice_["spec"]["devices"][0]["name"],
                    }
                ],
                "config": [
                    {
                        "source": "FromClaim",
                        "requests": c.get("requests", []),
                        "opaque": c["opaque"],
                    }
                    for c in devices.get("config", [])
                ],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    stored = kube.apply(claim)
    assert_valid_dra(stored)
    return PodClaim(namespace, stored["metadata"]["uid"], stored["metadata"]["name"])


def deallocate(kube: KubeMock, claim: PodClaim) -> None:
    """The pod is gone: the control plane deletes its claim (its device is free again)."""
    kube.delete("resourceclaims", claim.name, claim.namespace)
