# SPDX-License-Identifier: Apache-2.0
"""The DRA plugin's checkpoint: every claim a prepare began on this tray, on the agent's
own disk (`<state dir>/dra/checkpoint.json`).

A prepare records its claim *before* the portal hears of it, so an agent killed between
prepare and unprepare still undoes everything after its restart; an unprepare finishes
from it alone while the portal is away, and the portal is told later. The file is a
`CheckpointFile` (typed below, its JSON Schema generated from the types, as the agent ↔
portal contract's are):

- `version`: 2. Version 1 held one `cdi_device_id` per claim and knew no `leaving` claims:
  it is read as version 2 (an empty id: none) and written as 2 at the next change. A file
  of a newer version is read for the fields this version knows, with a warning;
- `boot_id`: the boot it was written under (`/proc/sys/kernel/random/boot_id`); what a
  prepare made (the CDI spec in /var/run/cdi, the channel nodes) does not survive a reboot;
- `claims`: claim uid → `CheckpointedClaim`.

Standard library only, like the rest of the agent's disk formats.
"""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, TypedDict

from agentwire.messages import K8S_NAME_PATTERN, Uuid
from agentwire.schema import json_schema, wire
from nodeagent.files import read_json, write_atomic

log = logging.getLogger("nodeagent.dra")

VERSION = 2


class ClaimState(enum.StrEnum):
    """Where a checkpointed claim is."""

    ADMITTING = "admitting"  # recorded, the portal being asked: unprepare undoes it
    PREPARED = "prepared"  # its CDI spec written, its devices returned to the kubelet
    REBOOTED = "rebooted"  # prepared before the last reboot: prepared again at the next call
    # Unprepared on the tray while the portal was away: the portal is told when it answers
    # again (then the claim leaves the checkpoint).
    LEAVING = "leaving"


# --- the file (what `json.loads` reads) ------------------------------------------------------
class CheckpointedClaimDoc(TypedDict):
    namespace: Annotated[str, wire(pattern=K8S_NAME_PATTERN, maxLength=63)]
    name: Annotated[str, wire(pattern=K8S_NAME_PATTERN)]
    domain_uid: Annotated[str, wire(maxLength=64)]
    request: Annotated[str, wire(maxLength=63)]  # the claim's request the device answers
    pool: Annotated[str, wire(maxLength=253)]  # this tray's pool (the node's name)
    state: Annotated[str, wire(enum=[s.value for s in ClaimState])]
    # What the kubelet was given: the claim's CDI device; none for a tray in no NVLink
    # clique, whose claim is prepared without a channel.
    cdi_device_ids: Annotated[list[str], wire(maxItems=8)]


class CheckpointFile(TypedDict):
    version: Annotated[int, wire(const=VERSION)]
    boot_id: Annotated[str, wire(maxLength=64)]
    claims: dict[Uuid, CheckpointedClaimDoc]


CHECKPOINT_SCHEMA = json_schema(CheckpointFile)


# --- in memory -------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointedClaim:
    namespace: str
    name: str
    domain_uid: str
    state: ClaimState
    request: str = ""
    pool: str = ""
    cdi_device_ids: tuple[str, ...] = field(default=())

    def to(self, state: ClaimState, **changes: Any) -> CheckpointedClaim:
        return replace(self, state=state, **changes)

    def doc(self) -> CheckpointedClaimDoc:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "domain_uid": self.domain_uid,
            "request": self.request,
            "pool": self.pool,
            "state": self.state.value,
            "cdi_device_ids": list(self.cdi_device_ids),
        }

    @classmethod
    def read(cls, doc: dict[str, Any], version: int) -> CheckpointedClaim:
        """One claim of a file of `version` (1: one `cdi_device_id`, "" for none)."""
        if version == 1:
            ids = [doc["cdi_device_id"]] if doc.get("cdi_device_id") else []
        else:
            ids = [str(i) for i in doc.get("cdi_device_ids") or []]
        state = str(doc.get("state") or ClaimState.ADMITTING)
        return cls(
            namespace=str(doc.get("namespace", "")),
            name=str(doc.get("name", "")),
            domain_uid=str(doc.get("domain_uid", "")),
            # An unknown state (a newer agent's): begun, so unprepare undoes it.
            state=ClaimState(state) if state in set(ClaimState) else ClaimState.ADMITTING,
            request=str(doc.get("request") or ""),
            pool=str(doc.get("pool") or ""),
            cdi_device_ids=tuple(ids),
        )


@dataclass
class Checkpoint:
    """The file's content; `save` writes it whole (atomically, durably)."""

    path: Path
    boot_id: str = ""
    claims: dict[str, CheckpointedClaim] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        doc = read_json(path) or {}
        version = doc.get("version")
        version = version if isinstance(version, int) and version >= 1 else 1
        if version > VERSION:
            log.warning(
                "DRA checkpoint %s is of version %s, newer than this agent's %s: reading what "
                "version %s knows of it", path, version, VERSION, VERSION,
            )  # fmt: skip
        raw = doc.get("claims") if isinstance(doc.get("claims"), dict) else {}
        claims = {
            str(uid): CheckpointedClaim.read(entry, version)
            for uid, entry in (raw or {}).items()
            if isinstance(entry, dict)
        }
        return cls(path=path, boot_id=str(doc.get("boot_id") or ""), claims=claims)

    def document(self) -> CheckpointFile:
        return {
            "version": VERSION,
            "boot_id": self.boot_id,
            "claims": {uid: claim.doc() for uid, claim in sorted(self.claims.items())},
        }

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.document(), indent=1, sort_keys=True) + "\n")
