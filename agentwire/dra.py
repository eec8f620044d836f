# SPDX-License-Identifier: Apache-2.0
"""The names the tray's DRA plugin publishes and the portal's Kubernetes objects refer to.

The driver name and the device class are the portal's own, never NVIDIA's: NVIDIA's GPU
driver may run beside it (its GPUs stay its own).
"""

DRIVER_NAME = "imex-channel.portal.domains"
DEVICE_CLASS = "compute-domain-channel.portal.domains"
DEVICE_NAME = "channel"  # the one device each tray publishes
CONFIG_API_VERSION = "portal.domains/v1"
CONFIG_KIND = "ComputeDomainChannelConfig"
CDI_CLAIM_KIND = f"{DRIVER_NAME}/claim"
