# SPDX-License-Identifier: Apache-2.0
"""NodePrepareResources / NodeUnprepareResources for the domain's channel claims.

Prepare, for each claim the kubelet names:

1. read the ResourceClaim from the API server: it must be the claim the kubelet means (same
   uid), allocated to this tray's `channel` device, with the opaque config of our driver
   naming the ComputeDomain (its ResourceClaimTemplate put it there);
2. ask the portal to admit the claim on this tray (`Tray.admit`): the portal checks that
   the claim's namespace owns the domain and that the tray is a member, or, for a domain
   that follows its workload, may join it now (quota, one clique, tray free and ready);
3. answer an error naming the reason until the tray's IMEX daemon serves the domain and is
   READY (the kubelet asks again: that is how a DRA driver says "not yet");
4. write a CDI spec for this claim alone (`<cdi dir>/imex-channel.portal.domains-<uid>.json`,
   device `imex-channel.portal.domains/claim=<uid>`) naming the domain's channel device(s),
   and return its id.

Unprepare removes that spec and tells the portal the claim is gone (the last claim of a
domain that follows its workload takes the tray out of it). Both are idempotent, and what
was begun is recorded in a checkpoint on disk (`nodeagent.dra.checkpoint`) *before* it is
done, so an agent killed between prepare and unprepare still undoes everything after its
restart.

The checkpoint survives a reboot; what a prepare made does not (the CDI spec under
/var/run/cdi and the channel device nodes live in tmpfs). So the checkpoint carries the boot
id it was written under, and one from an earlier boot no longer counts a claim as prepared:
the kubelet's next prepare does it all again. Unlike NVIDIA's driver, which drops such a
checkpoint whole, the claims stay listed, so that an unprepare still gives back what the
portal holds for them.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nodeagent.channels import cdi_device_node, cdi_document
from nodeagent.config import CHANNELS_DIR
from nodeagent.dra import (
    CDI_CLAIM_KIND,
    CONFIG_KIND,
    DEVICE_NAME,
    DRIVER_NAME,
)
from nodeagent.dra.checkpoint import Checkpoint, CheckpointedClaim, ClaimState
from nodeagent.dra.kubeapi import KubeError, ResourceApi
from nodeagent.dra.opaque import BadConfig, channel_config
from nodeagent.dra.server import ClaimRef, PreparedDevice, PrepareResult
from nodeagent.files import remove, write_atomic

log = logging.getLogger("nodeagent.dra")


class NotTold(Exception):
    """The portal could not be told that a claim was unprepared (it is away: the web, its
    database or Redis): the claim is let go of on the tray all the same, and the portal is
    told when it answers again."""


class Refused(Exception):
    """The portal (or the tray) says no; the text is what the user must read.

    `held`: whether the portal may hold something for the claim (False for a clear refusal
    or a call never made), so that the checkpoint keeps it for unprepare to undo.
    """

    def __init__(self, message: str, *, held: bool = True) -> None:
        super().__init__(message)
        self.held = held


@dataclass(frozen=True)
class Serving:
    """What the tray serves right now, as the agent's loop last observed it."""

    domain_uid: str
    daemon_state: str  # the `nvidia-imex-ctl -q` word
    channels: list[int]  # channel devices present for it
    major: int | None
    mode: str  # Single | All
    file_mode: int
    gid: int | None


class Tray(Protocol):
    """What the claim driver needs from the agent."""

    node_name: str
    root: Path

    def admit(self, claim: ClaimRef, domain_uid: str) -> dict[str, Any]: ...

    def leave(self, claim: ClaimRef) -> None:
        """Tell the portal the claim was unprepared here; NotTold when it cannot be told."""
        ...

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving | None: ...


BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
# How long one prepare call may keep trying: NVIDIA's driver retries for up to 45 s, the
# kubelet's own timeout for the call; a little less leaves the answer time to arrive.
PREPARE_WAIT_S = 40.0
RETRY_FIRST_S = 0.25  # then doubling, up to
RETRY_MAX_S = 4.0


def read_boot_id(path: Path) -> str:
    """This boot's id; "" when it cannot be read (then no checkpoint is judged by it)."""
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


class ClaimDriver:
    def __init__(
        self,
        tray: Tray,
        api: ResourceApi,
        *,
        state_dir: Path,
        cdi_dir: Path,
        wait_s: float = PREPARE_WAIT_S,
        boot_id_file: Path = BOOT_ID_FILE,
    ) -> None:
        self.tray = tray
        self.api = api
        self.checkpoint_path = state_dir / "dra/checkpoint.json"
        self.cdi_dir = cdi_dir
        self.wait_s = wait_s
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.boot_id = read_boot_id(boot_id_file)
        self.checkpoint = self._load()

    # --- checkpoint -------------------------------------------------------------------------
    def _load(self) -> Checkpoint:
        checkpoint = Checkpoint.load(self.checkpoint_path)
        written_under, checkpoint.boot_id = checkpoint.boot_id, self.boot_id
        if not (checkpoint.claims and self.boot_id and written_under and
                written_under != self.boot_id):  # fmt: skip
            return checkpoint  # same boot, or one of the two unknown: the checkpoint holds
        claims = checkpoint.claims
        stale = [uid for uid, claim in claims.items() if claim.state == ClaimState.PREPARED]
        for uid in stale:
            claims[uid] = claims[uid].to(ClaimState.REBOOTED, cdi_device_ids=())
            remove(self.cdi_path(uid))  # what of it is left outside tmpfs
        log.info(
            "%s: the node rebooted since the DRA checkpoint was written (boot id %s, now %s): "
            "%d claim(s) are prepared again at the kubelet's next call",
            self.tray.node_name, written_under, self.boot_id, len(stale),
        )  # fmt: skip
        checkpoint.save()  # under this boot's id: a restart of the agent changes nothing more
        return checkpoint

    @property
    def claims(self) -> dict[str, CheckpointedClaim]:
        return self.checkpoint.claims

    def prepared(self) -> dict[str, CheckpointedClaim]:
        with self.lock:
            return dict(self.claims)

    def cdi_path(self, uid: str) -> Path:
        return self.cdi_dir / f"{DRIVER_NAME}-{uid}.json"

    # --- prepare ----------------------------------------------------------------------------
    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        """Each claim prepared, or an error; what may pass (the daemon not READY yet, the
        portal or the API server briefly away) is tried again within one deadline for the
        whole call, as NVIDIA's driver does, so that the kubelet's 10-15 s backoff is paid
        only when it lasts. The deadline stays inside the kubelet's own call timeout (45 s),
        so the kubelet reads the reason instead of a timeout."""
        deadline = time.monotonic() + self.wait_s
        return {claim.uid: self._prepare_retrying(claim, deadline) for claim in claims}

    def _prepare_retrying(self, claim: ClaimRef, deadline: float) -> PrepareResult:
        delay = RETRY_FIRST_S
        while True:
            result, passing = self._prepare_one(claim, deadline)
            if not passing or time.monotonic() + delay >= deadline:
                return result
            if self.stopping.wait(delay):
                return result
            delay = min(delay * 2, RETRY_MAX_S)

    def stop(self) -> None:
        """Calls under way answer with what they have now."""
        self.stopping.set()

    def _prepare_one(self, claim: ClaimRef, deadline: float) -> tuple[PrepareResult, bool]:
        """(the answer, whether its error may pass if asked again)."""
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        with self.lock:
            done = self.claims.get(claim.uid)
        if done and done.state == ClaimState.PREPARED:
            return _result(done), False
        try:
            found = self._allocation(claim, where)
            request, domain_uid = found
            with self.lock:  # recorded before the portal hears of it: unprepare undoes it
                self.claims[claim.uid] = CheckpointedClaim(
                    namespace=claim.namespace,
                    name=claim.name,
                    domain_uid=domain_uid,
                    state=ClaimState.ADMITTING,
                    request=request,
                    pool=self.tray.node_name,
                )
                self.checkpoint.save()
            cdi_ids, domain = self._serve(claim, domain_uid, deadline)
        except Refused as exc:
            if not exc.held:
                self._forget(claim.uid)
            return PrepareResult(error=f"{where}: {exc}"), exc.held
        except KubeError as exc:
            passing = exc.status in (0, 429) or exc.status >= 500
            return PrepareResult(error=f"{where}: could not read the claim: {exc}"), passing
        with self.lock:
            begun = self.claims.get(claim.uid)
            if begun is not None:
                entry = begun.to(ClaimState.PREPARED, cdi_device_ids=cdi_ids)
                self.claims[claim.uid] = entry
                self.checkpoint.save()
        if begun is None:  # `drop_stale` found its ResourceClaim gone meanwhile and undid it
            remove(self.cdi_path(claim.uid))
            return PrepareResult(error=f"{where}: deleted while it was being prepared"), False
        devices = ", ".join(cdi_ids) or "no channel"
        log.info("%s: prepared %s (%s) for domain %s", self.tray.node_name, where, devices, domain)
        return _result(entry), False

    def _serve(
        self, claim: ClaimRef, domain_uid: str, deadline: float
    ) -> tuple[tuple[str, ...], str]:
        """Admitted by the portal, the tray's daemon READY for the domain, the claim's CDI
        spec written: (its CDI device ids, the domain's name). A tray in no NVLink clique
        (the portal's index -1) is prepared without a channel, as NVIDIA's driver prepares a
        claim on a node that is not fabric-attached: no daemon to wait for, no CDI spec."""
        admitted = self.tray.admit(claim, domain_uid)
        domain = str(admitted.get("domain_name") or domain_uid)
        if admitted.get("index") == -1:
            return (), domain
        wait = 0.0 if self.stopping.is_set() else max(0.0, deadline - time.monotonic())
        serving = self.tray.wait_serving(domain_uid, wait)
        if serving is None or serving.daemon_state != "READY" or not serving.channels:
            state = serving.daemon_state if serving else "not started"
            raise Refused(
                f"the IMEX daemon on {self.tray.node_name} is not ready for ComputeDomain "
                f"{domain} yet (nvidia-imex {state or 'not answering'}); the kubelet "
                "retries, nothing to do unless this lasts"
            )
        return (self._write_cdi(claim.uid, serving),), domain

    def _allocation(self, claim: ClaimRef, where: str) -> tuple[str, str]:
        """(request name, domain uid) of the claim's allocation on this tray's device."""
        obj = self.api.get_claim(claim.namespace, claim.name)
        if obj is None:
            raise Refused("not found in the API server (deleted?)", held=False)
        if obj["metadata"].get("uid") != claim.uid:
            raise Refused(
                f"has uid {obj['metadata'].get('uid')}, not {claim.uid}: it was deleted and "
                "created again; the kubelet asks for the new one",
                held=False,
            )
        devices = ((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}
        ours = [
            r
            for r in devices.get("results") or []
            if r.get("driver") == DRIVER_NAME and r.get("pool") == self.tray.node_name
        ]
        if not ours:
            raise Refused(
                f"is not allocated to a device of driver {DRIVER_NAME} on node "
                f"{self.tray.node_name}",
                held=False,
            )
        configs = [
            (c.get("opaque") or {}).get("parameters")
            for c in devices.get("config") or []
            if (c.get("opaque") or {}).get("driver") == DRIVER_NAME
        ]
        try:
            domain_uid = next((channel_config(p) for p in configs), None)
        except BadConfig as exc:  # permanent: the claim must be made again
            raise Refused(str(exc), held=False) from exc
        if not domain_uid:
            raise Refused(
                f"carries no {CONFIG_KIND} for driver {DRIVER_NAME}: make the claim from the "
                "ResourceClaimTemplate of a ComputeDomain (spec.channel.resourceClaimTemplate)",
                held=False,
            )
        return str(ours[0].get("request") or ""), str(domain_uid)

    def _write_cdi(self, uid: str, serving: Serving) -> str:
        if serving.major is None:
            raise Refused(f"no nvidia-caps-imex-channels device major on {self.tray.node_name}")
        node = functools.partial(
            cdi_device_node, major=serving.major, file_mode=serving.file_mode, gid=serving.gid
        )
        if serving.mode == "Single":
            # As NVIDIA's driver gives it, and as its examples and workloads expect: the
            # container's one channel is channel0 (minor 0), made by the runtime inside the
            # container only. Domains stay apart as in NVIDIA's design: a tray serves one
            # domain at a time, and its daemon shares memory with that domain's members only.
            nodes = [node(0)]
        else:
            channels = self.tray.root / CHANNELS_DIR
            nodes = [node(n, host_path=channels / f"channel{n}") for n in serving.channels]
        # Which claim and domain the file is for is in its name and in the checkpoint, not in
        # annotations, which would ask the runtime for a newer CDI version than it needs.
        devices = [{"name": uid, "containerEdits": {"deviceNodes": nodes}}]
        write_atomic(self.cdi_path(uid), cdi_document(CDI_CLAIM_KIND, devices))
        return f"{CDI_CLAIM_KIND}={uid}"

    def _forget(self, uid: str) -> None:
        """Drop a claim the portal holds nothing for (refused, or never asked)."""
        with self.lock:
            entry = self.claims.get(uid)
            if entry is not None and entry.state == ClaimState.ADMITTING:
                del self.claims[uid]
                self.checkpoint.save()

    # --- unprepare --------------------------------------------------------------------------
    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        return {claim.uid: self._unprepare_one(claim) for claim in claims}

    def _unprepare_one(self, claim: ClaimRef) -> str:
        with self.lock:
            entry = self.claims.get(claim.uid)
        remove(self.cdi_path(claim.uid))  # first: the container runtime finds no device
        if entry is None or entry.state == ClaimState.LEAVING:
            return ""  # nothing recorded, or unprepared already (the portal told later)
        try:
            self._tell(claim.uid, entry)
        except NotTold as exc:
            # The tray lets go of it from its own checkpoint: a pod's end never waits for
            # the portal. The portal hears of it when it answers again (`tell_portal`).
            with self.lock:
                if self.claims.get(claim.uid) == entry:
                    self.claims[claim.uid] = entry.to(ClaimState.LEAVING, cdi_device_ids=())
                    self.checkpoint.save()
            log.warning("%s: unprepared ResourceClaim %s/%s; the portal is told when it "
                        "answers again (%s)", self.tray.node_name, entry.namespace,
                        entry.name, exc)  # fmt: skip
            return ""
        log.info("%s: unprepared ResourceClaim %s/%s",
                 self.tray.node_name, entry.namespace, entry.name)  # fmt: skip
        return ""

    def _tell(self, uid: str, entry: CheckpointedClaim) -> None:
        """Tell the portal the claim is gone from the tray, then forget it."""
        self.tray.leave(ClaimRef(entry.namespace, uid, entry.name))
        with self.lock:
            if self.claims.get(uid) in (entry, entry.to(ClaimState.LEAVING, cdi_device_ids=())):
                self.claims.pop(uid)
                self.checkpoint.save()

    def leaving(self) -> int:
        """How many unprepared claims the portal has not been told of yet."""
        with self.lock:
            return sum(c.state == ClaimState.LEAVING for c in self.claims.values())

    def tell_portal(self) -> list[str]:
        """Tell the portal of the claims unprepared while it was away (the last claim of a
        domain that follows its workload takes the tray out of it then); returns the uids it
        took. Stops at the first it cannot be told of: it is away still."""
        with self.lock:
            leaving = {u: c for u, c in self.claims.items() if c.state == ClaimState.LEAVING}
        told = []
        for uid, entry in leaving.items():
            try:
                self._tell(uid, entry)
            except NotTold:
                break
            log.info("%s: told the portal ResourceClaim %s/%s was unprepared",
                     self.tray.node_name, entry.namespace, entry.name)  # fmt: skip
            told.append(uid)
        return told

    # --- claims nobody will unprepare -------------------------------------------------------
    def drop_stale(self) -> list[str]:
        """Unprepare the checkpoint's claims whose ResourceClaim is gone from the API server
        (not found, or the name now belongs to another uid); returns their uids.

        The kubelet unprepares what it prepared, but not a claim it lost track of: one whose
        prepare never finished before its pod went, one prepared before a reboot whose pod
        was deleted meanwhile. Without this the portal would hold such a claim, and keep the
        tray in its domain, for good. A ResourceClaim still in use cannot be gone (its
        deletion waits until it is deallocated), so nothing a pod uses is undone. As
        NVIDIA's driver does, at the plugin's start and every few minutes; an API server
        that does not answer leaves everything as it is until the next time."""
        with self.lock:
            entries = {u: c for u, c in self.claims.items() if c.state != ClaimState.LEAVING}
        dropped = []
        for uid, entry in entries.items():
            namespace, name = entry.namespace, entry.name
            try:
                obj = self.api.get_claim(namespace, name)
            except KubeError as exc:  # the others would wait as long: all next time
                log.warning("%s: could not check ResourceClaim %s/%s: %s",
                            self.tray.node_name, namespace, name, exc)  # fmt: skip
                break
            if obj is not None and obj["metadata"].get("uid") == uid:
                continue
            log.info("%s: ResourceClaim %s/%s (%s) is gone; unpreparing it",
                     self.tray.node_name, namespace, name, uid)  # fmt: skip
            self._unprepare_one(ClaimRef(namespace, uid, name))
            dropped.append(uid)
        return dropped


def _result(entry: CheckpointedClaim) -> PrepareResult:
    return PrepareResult(
        devices=[
            PreparedDevice(
                request_names=[entry.request] if entry.request else [],
                pool_name=entry.pool,
                device_name=DEVICE_NAME,
                cdi_device_ids=list(entry.cdi_device_ids),
            )
        ]
    )
