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
- `claims`: prepare and unprepare, with the per-claim CDI spec and the on-disk checkpoint.

The driver name and the device class are the portal's own, never NVIDIA's: NVIDIA's GPU
driver may run beside it (its GPUs stay its own).
"""

DRIVER_NAME = "imex-channel.portal.domains"
DEVICE_CLASS = "compute-domain-channel.portal.domains"
DEVICE_NAME = "channel"  # the one device each tray publishes
CONFIG_API_VERSION = "portal.domains/v1"
CONFIG_KIND = "ComputeDomainChannelConfig"
CDI_CLAIM_KIND = f"{DRIVER_NAME}/claim"
