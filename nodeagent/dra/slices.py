# SPDX-License-Identifier: Apache-2.0
"""The tray's ResourceSlice: one pool named after the node, one device named `channel`.

The scheduler allocates a domain's claims to this device; its attributes say which NVLink
clique and which tray it sits on, so CEL selectors and the pods' clique affinity can use
them. The agent owns the slice: it creates it once it knows the tray's facts, rewrites it
when they change (bumping the pool's generation) and deletes it when it stops serving the
tray.

`v1` (Kubernetes 1.34) lists a device's attributes on the device itself; `v1beta1` (1.32,
1.33) under `devices[].basic`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from nodeagent.dra import DEVICE_NAME, DRIVER_NAME
from nodeagent.dra.kubeapi import GROUP, KubeError, ResourceApi

log = logging.getLogger("nodeagent.dra")


@dataclass(frozen=True)
class SliceFacts:
    """What the slice says about the tray."""

    node: str  # the Kubernetes Node name (= the tray's hostname)
    clique: str  # "<cluster uuid>.<clique id>", the nvidia.com/gpu.clique label; "" unknown
    gpus: int


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER_NAME}"


def slice_object(facts: SliceFacts, *, version: str, generation: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "channel"},
        "tray": {"string": facts.node},
        "gpus": {"int": facts.gpus},
    }
    if facts.clique:
        attributes["clique"] = {"string": facts.clique}
    device: dict[str, Any] = {"name": DEVICE_NAME}
    if version == "v1beta1":
        device["basic"] = {"attributes": attributes}
    else:
        device["attributes"] = attributes
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(facts.node),
            "labels": {"app.kubernetes.io/managed-by": "domain-portal"},
        },
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": facts.node,
            "pool": {"name": facts.node, "generation": generation, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


class SlicePublisher:
    """Keeps the tray's slice equal to its facts; every call is idempotent."""

    def __init__(self, api: ResourceApi) -> None:
        self.api = api
        self.published: SliceFacts | None = None
        self.lock = threading.Lock()

    def publish(self, facts: SliceFacts) -> bool:
        """Create or update the slice; returns whether anything was written."""
        with self.lock:
            if facts == self.published:
                return False
            name = slice_name(facts.node)
            current = self.api.get_slice(name)
            if current is None:
                self.api.create_slice(slice_object(facts, version=self.api.version, generation=1))
                log.info("%s: published ResourceSlice %s", facts.node, name)
            else:
                pool = current.get("spec", {}).get("pool", {})
                generation = int(pool.get("generation") or 0)
                wanted = slice_object(facts, version=self.api.version, generation=generation)
                if wanted["spec"] != current.get("spec"):
                    wanted = slice_object(
                        facts, version=self.api.version, generation=generation + 1
                    )
                    wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    self.api.replace_slice(name, wanted)
                    log.info("%s: updated ResourceSlice %s", facts.node, name)
            self.published = facts
            return True

    def remove(self, node: str) -> None:
        with self.lock:
            try:
                self.api.delete_slice(slice_name(node))
            except KubeError as exc:
                log.warning("%s: could not delete ResourceSlice: %s", node, exc)
                return
            self.published = None
            log.info("%s: removed ResourceSlice %s", node, slice_name(node))
