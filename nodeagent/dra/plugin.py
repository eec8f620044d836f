# SPDX-License-Identifier: Apache-2.0
"""The DRA plugin of one tray, as the agent runs it: gRPC servers, slice, claims.

The agent's reconcile loop stays the owner of the tray (daemon, config, channels); the
plugin answers the kubelet from gRPC threads and asks the loop, through `TrayView`, what
the tray serves. It never starts or stops a daemon itself: admitting a claim changes the
portal's desired state, and the loop applies it like any other.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nodeagent.client import PortalClient, PortalError
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.claims import (
    BOOT_ID_FILE,
    PREPARE_WAIT_S,
    ClaimDriver,
    NotTold,
    Refused,
    Serving,
)
from nodeagent.dra.kubeapi import KubeError, ResourceApi, api_client
from nodeagent.dra.server import ClaimRef, MeteredDriver, PluginServer
from nodeagent.dra.slices import SliceFacts, SlicePublisher

log = logging.getLogger("nodeagent.dra")

SLICE_RETRY_S = 5.0
STALE_CLAIMS_S = 600.0  # how often the checkpoint is checked against the API server
TELL_RETRY_MAX_S = 10.0  # unprepares the portal missed: told again, backing off to this


@dataclass(frozen=True)
class PluginConfig:
    kubelet_dir: Path  # /var/lib/kubelet: plugins_registry/ and plugins/<driver>/ under it
    kubeconfig: Path | None  # None: KUBECONFIG, else the pod's service account
    cdi_dir: Path  # where the per-claim CDI specs go (/var/run/cdi)
    state_dir: Path  # the checkpoint lives under it
    prepare_wait_s: float = PREPARE_WAIT_S  # how long a prepare keeps trying before "not yet"
    boot_id_file: Path = BOOT_ID_FILE  # a checkpoint of an earlier boot prepares nothing


class TrayView(Protocol):
    """What the plugin asks of the agent."""

    def nudge(self) -> None: ...

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving | None: ...


class DraPlugin:
    def __init__(
        self,
        config: PluginConfig,
        *,
        node_name: str,
        root: Path,
        client: PortalClient,
        tray: TrayView,
        api: ResourceApi | None = None,
    ) -> None:
        self.cfg = config
        self.node_name = node_name
        self.root = root
        self.client = client
        self.tray = tray
        self.api = api or ResourceApi(api_client(config.kubeconfig))
        self.slices = SlicePublisher(self.api)
        self.driver = ClaimDriver(
            self,
            self.api,
            state_dir=config.state_dir,
            cdi_dir=config.cdi_dir,
            wait_s=config.prepare_wait_s,
            boot_id_file=config.boot_id_file,
        )
        self.server = PluginServer(
            MeteredDriver(self.driver),  # each prepare timed, its errors counted
            registry_dir=config.kubelet_dir / "plugins_registry",
            plugin_dir=config.kubelet_dir / "plugins" / DRIVER_NAME,
        )
        self.started = False
        self.watching = threading.Event()  # set: the slice's watch ends
        self.slice_retry_at = 0.0
        self.stale_check_at = 0.0  # the first check comes with the first cycle
        self.tell_retry_at = self.tell_backoff = 0.0  # of unprepares the portal missed
        self.lock = threading.Lock()

    # --- life ---------------------------------------------------------------------------
    def start(self) -> None:
        if not self.started:
            self.driver.stopping.clear()
            self.server.start()
            self.started = True
            self.watching = threading.Event()
            threading.Thread(
                target=self.slices.keep,
                args=(self.node_name, self.watching),
                name="dra-slice",
                daemon=True,
            ).start()

    def stop(self) -> None:
        """The agent stops: no more kubelet calls. The slice stays (see `slices`): the next
        agent advertises the tray as this one did until it hears from the portal."""
        if self.started:
            self.watching.set()
            self.driver.stop()
            self.server.stop()
            self.started = False
        self.slices.let_go()

    def publish_slice(
        self, facts: dict[str, Any], domain: str = "", *, eligible: bool = False
    ) -> None:
        """Keep the tray's ResourceSlice current; API trouble is retried a few seconds on."""
        now = time.monotonic()
        if now < self.slice_retry_at:
            return
        clique = ""
        if facts.get("cluster_uuid") and facts.get("clique_id") is not None:
            clique = f"{facts['cluster_uuid']}.{facts['clique_id']}"
        wanted = SliceFacts(node=self.node_name, clique=clique, gpus=len(facts.get("gpus", [])),
                            domain=domain, eligible=eligible)  # fmt: skip
        try:
            self.slices.publish(wanted)
        except KubeError as exc:
            log.warning("%s: ResourceSlice not published: %s", self.node_name, exc)
            self.slice_retry_at = now + SLICE_RETRY_S

    def drop_stale_claims(self) -> None:
        """Undo the checkpoint's claims whose ResourceClaim is gone (at start, then every
        STALE_CLAIMS_S); needs the node token, to tell the portal."""
        now = time.monotonic()
        if now < self.stale_check_at or not self.client.token:
            return
        self.stale_check_at = now + STALE_CLAIMS_S
        self.driver.drop_stale()

    # --- claims.Tray -------------------------------------------------------------------
    def admit(self, claim: ClaimRef, domain_uid: str) -> dict[str, Any]:
        if not self.client.token:
            raise Refused(
                f"the node agent on {self.node_name} has not joined the portal yet", held=False
            )
        request = {
            "claim": {"uid": claim.uid, "namespace": claim.namespace, "name": claim.name},
            "domain_uid": domain_uid,
        }
        # Claims unprepared while the portal was away first: a tray that left a domain
        # meanwhile must be out of it before a claim of another domain asks to join.
        self.tell_portal(force=True)
        try:
            answer: dict[str, Any] = dict(self.client.claim_admit(request))  # type: ignore[arg-type]
        except PortalError as exc:
            if 400 <= exc.status < 500:
                raise Refused(exc.detail, held=False) from exc  # it holds nothing for it
            raise Refused(
                f"the portal is away ({exc.what}): tray {self.node_name} admits no new claim "
                "until it answers (claims already prepared keep their channel, and pods that "
                "end are let go of); the kubelet retries"
            ) from exc
        self.tray.nudge()  # fetch the desired state now: the tray may have joined
        return answer

    def leave(self, claim: ClaimRef) -> None:
        try:
            self.client.claim_leave(claim.uid)
        except PortalError as exc:
            raise NotTold(exc.what) from exc
        self.tray.nudge()

    def tell_portal(self, *, force: bool = False) -> None:
        """Tell the portal of the claims unprepared while it was away: on every cycle (with
        backoff while it stays away) and before a prepare asks it anything (`force`)."""
        now = time.monotonic()
        if not self.driver.leaving() or (now < self.tell_retry_at and not force):
            return
        self.driver.tell_portal()
        if self.driver.leaving():
            self.tell_backoff = min(max(2 * self.tell_backoff, 0.5), TELL_RETRY_MAX_S)
            self.tell_retry_at = now + self.tell_backoff
        else:
            self.tell_backoff = self.tell_retry_at = 0.0

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving | None:
        return self.tray.wait_serving(domain_uid, timeout)
