# SPDX-License-Identifier: Apache-2.0
"""The tray's ResourceSlice: one pool named after the node, one device named `channel`.

The scheduler allocates a domain's claims to this device; its attributes say which NVLink
clique and which tray it sits on ("" while the clique is unknown), which domain it serves
(`domain`, the uid; "" while free) and whether a claim may make it a new member
(`eligible`), so the domain's claim template selects only trays its admission would take. The
agent owns the slice: it creates it once it knows the tray's facts and rewrites it when
they change (bumping the pool's generation). It never deletes it when it stops, as
NVIDIA's kubelet plugin never does: a restarted agent finds its tray advertised as it was
(never as free while it serves a domain), and the kubelet itself wipes the slices of a
driver that stays unregistered (a plugin that is really gone, an uninstall).

`v1` (Kubernetes 1.34) lists a device's attributes on the device itself; `v1beta1` (1.32,
1.33) under `devices[].basic`.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import Any

from agentwire.messages import DesiredState
from nodeagent.dra import DEVICE_NAME, DRIVER_NAME
from nodeagent.dra.kubeapi import GROUP, KubeError, ResourceApi

log = logging.getLogger("nodeagent.dra")

WATCH_TIMEOUT_S = 300  # one watch request; the server may end it sooner
WATCH_RETRY_S = 2.0  # after the API server refused or dropped the watch, doubling up to
WATCH_RETRY_MAX_S = 30.0


@dataclass(frozen=True)
class SliceFacts:
    """What the slice says about the tray."""

    node: str  # the Kubernetes Node name (= the tray's hostname)
    clique: str  # "<cluster uuid>.<clique id>", the nvidia.com/gpu.clique label; "" unknown
    gpus: int
    domain: str = ""  # the uid of the domain the tray serves now; "" free
    # May a claim make the tray a new member now (the portal's word: ready, in a clique, no
    # blocking condition, held by no domain, no maintenance window scheduled)? A cordoned,
    # draining, down or pending tray is not.
    eligible: bool = True


def scheduling(desired: DesiredState | None, *, fetched: bool = True) -> tuple[str, bool]:
    """The slice's `domain` and `eligible` from the portal's desired state: the uid of the
    domain the tray serves ("" free) and whether a claim may make it a new member (taken as
    True when the portal leaves it out).

    Until the agent has fetched one since it started (`fetched` False; the portal may be
    away), `desired` is the last one it fetched before (kept on its disk), and the tray is
    never eligible: a Pending pod of a domain that follows its workload must not be
    allocated a tray that may serve another domain, and would then hang. No desired state
    at all (a new agent): free, not eligible."""
    if desired is None:
        return "", False
    held = desired["domain"]
    return (held["uid"] if held else ""), fetched and desired.get("eligible", True)


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER_NAME}"


def slice_object(facts: SliceFacts, *, version: str, generation: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "channel"},
        "tray": {"string": facts.node},
        "gpus": {"int": facts.gpus},
        # Always present (a CEL selector that reads a missing attribute fails): the domain's
        # ResourceClaimTemplate selects its own trays, or free ones of its clique, by them.
        "domain": {"string": facts.domain},
        "eligible": {"bool": facts.eligible},
        "clique": {"string": facts.clique},
    }
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
    """Keeps the tray's slice equal to its facts; every call is idempotent.

    Someone else may delete the slice: the kubelet deletes every ResourceSlice of its node
    when it starts (and those of a driver that stays unregistered). A publisher that only
    compared facts would never notice, and the tray would drop out of DRA until its facts
    changed. So `keep` watches the slice from its own thread and publishes it again the
    moment it is deleted while it is wanted; a relist after every broken or expired watch
    catches a deletion the watch did not see.
    """

    def __init__(self, api: ResourceApi) -> None:
        self.api = api
        self.wanted: SliceFacts | None = None  # what the agent last asked for
        self.published: SliceFacts | None = None  # what the API server is known to hold
        self.lock = threading.Lock()

    def publish(self, facts: SliceFacts) -> bool:
        """Create or update the slice; returns whether anything was written."""
        with self.lock:
            self.wanted = facts
            if facts == self.published:
                return False
            self._write(facts)
            return True

    def _write(self, facts: SliceFacts) -> bool:
        """Make the server's slice say `facts`; True when it had none."""
        name = slice_name(facts.node)
        current = self.api.get_slice(name)
        created = current is None
        if current is None:
            self.api.create_slice(slice_object(facts, version=self.api.version, generation=1))
            log.info("%s: published ResourceSlice %s", facts.node, name)
        else:
            pool = current.get("spec", {}).get("pool", {})
            generation = int(pool.get("generation") or 0)
            wanted = slice_object(facts, version=self.api.version, generation=generation)
            if wanted["spec"] != current.get("spec"):
                wanted = slice_object(facts, version=self.api.version, generation=generation + 1)
                wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.api.replace_slice(name, wanted)
                log.info("%s: updated ResourceSlice %s", facts.node, name)
        self.published = facts
        return created

    def lost(self, node: str) -> None:
        """The slice seemed gone from the API server: publish it again if it is wanted (what
        the server says now decides: a list older than our own create changes nothing). A
        failure leaves it unpublished, and the agent's next `publish` tries again."""
        with self.lock:
            self.published = None
            if self.wanted is None or self.wanted.node != node:
                return
            try:
                if self._write(self.wanted):
                    log.warning("%s: ResourceSlice %s had been deleted; published it again",
                                node, slice_name(node))  # fmt: skip
            except KubeError as exc:
                log.warning("%s: ResourceSlice not published again: %s", node, exc)

    def keep(self, node: str, stop: threading.Event) -> None:
        """Watch the node's slice until `stop` is set (run it in a thread of its own)."""
        name = slice_name(node)
        retry = WATCH_RETRY_S
        while not stop.is_set():
            try:
                listing = self.api.list_slices(name)
                if not any(i["metadata"]["name"] == name for i in listing.get("items") or []):
                    self.lost(node)
                version = str(listing["metadata"]["resourceVersion"])
                retry = WATCH_RETRY_S  # the server answers again
                for kind, _ in self.api.watch_slices(name, version, WATCH_TIMEOUT_S):
                    if stop.is_set():
                        return
                    if kind == "DELETED":
                        self.lost(node)
            except KubeError as exc:
                log.warning("%s: watching ResourceSlice %s: %s", node, name, exc)
            except Exception:  # an answer not shaped as expected: the watch must not end
                log.exception("%s: watching ResourceSlice %s failed", node, name)
            else:
                continue  # the watch ended (its version expired): list again at once
            stop.wait(retry * random.uniform(0.5, 1.0))
            retry = min(retry * 2, WATCH_RETRY_MAX_S)

    def let_go(self) -> None:
        """The agent stops: the slice stays as it is, and its watch (ending with the agent)
        publishes it no more."""
        with self.lock:
            self.wanted = None
