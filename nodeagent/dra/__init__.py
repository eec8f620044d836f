# SPDX-License-Identifier: Apache-2.0
"""The node agent as a DRA kubelet plugin (Kubernetes Dynamic Resource Allocation).

On a cluster, a pod gets its IMEX channel the way NVIDIA's ComputeDomain driver delivers
it: the pod names the domain's ResourceClaimTemplate, the scheduler allocates the claim to
the `channel` device this tray publishes in its ResourceSlice, and the kubelet calls this
plugin's `NodePrepareResources`; the CDI device id it returns is what the container
runtime puts into the containers. The pieces:

- `pb/`: the kubelet's gRPC contract, our own `.proto` files and their generated modules
  (`make proto`);
- `server`: the registration socket and the `DRAPlugin` service (v1 and v1beta1);
- `kubeapi`: the few `resource.k8s.io` calls (API discovery picks v1 or v1beta1);
- `slices`: the tray's ResourceSlice;
- `claims`: prepare and unprepare, with the per-claim CDI spec;
- `checkpoint`: the claims a prepare began, typed and versioned on the agent's disk.

The names it publishes are the contract's (`agentwire.dra`).
"""

from agentwire.dra import (
    CDI_CLAIM_KIND,
    CONFIG_API_VERSION,
    CONFIG_KIND,
    DEVICE_CLASS,
    DEVICE_NAME,
    DRIVER_NAME,
)

__all__ = [
    "CDI_CLAIM_KIND",
    "CONFIG_API_VERSION",
    "CONFIG_KIND",
    "DEVICE_CLASS",
    "DEVICE_NAME",
    "DRIVER_NAME",
]
