# SPDX-License-Identifier: Apache-2.0
"""Fabric probe: GPUs, NVLink clique and driver version (NVML), channel major (/proc/devices).

A clique is `<clusterUuid>.<cliqueId>` from NVML's GPU fabric info. "Not supported" (PCIe
GPUs) or an all-zero cluster uuid (HGX H100) both mean the tray has no multi-node NVLink;
fabric info is meaningful only once its state is COMPLETED, and a completed registration
whose status is not success failed.

The probe never raises. What keeps the tray from serving a domain becomes a *condition*
(NVML not loadable, registration unfinished or failed, GPUs that disagree, no channel
major) that the agent reports and the portal shows on the tray's page. A probe that may
still change (NVML failed, a registration in progress) is `settled=False`, and the agent
probes again with backoff until it settles.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from agentwire.messages import Condition, ConditionType, GpuFacts
from nodeagent.driver import NVML_LIBRARY, CapabilityError, DriverRoot, imex_mgmt

CHANNEL_DEVICE_NAME = "nvidia-caps-imex-channels"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
PENDING_STATES = ("NOT_STARTED", "IN_PROGRESS")


class ProbeError(RuntimeError):
    """NVML (or its stand-in) could not tell the tray's facts; the message says why."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    product: str
    fabric_state: str  # NOT_SUPPORTED | NOT_STARTED | IN_PROGRESS | COMPLETED | FAILED
    cluster_uuid: str = ""
    clique_id: int = 0
    fabric_error: str = ""  # NVML's message when the registration FAILED
    vbios_version: str = ""  # the GPU's firmware; "" where NVML does not say

    def document(self) -> GpuFacts:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "product": self.product,
            "fabric_state": self.fabric_state,
            "vbios_version": self.vbios_version,
        }


@dataclass(frozen=True)
class Facts:
    """What the probe found on the tray, and what keeps it from serving a domain."""

    hostname: str
    ip: str
    gpus: list[Gpu] = field(default_factory=list)
    cluster_uuid: str = ""  # "" when the tray has no (completed) multi-node NVLink clique
    clique_id: int | None = None
    driver_version: str = ""
    channel_major: int | None = None
    channel_count: int = 2048
    conditions: list[Condition] = field(default_factory=list)
    settled: bool = True  # False: probing again may change the answer

    @property
    def clique(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}" if self.cluster_uuid else ""


def channel_major(proc_devices: Path) -> int | None:
    """The `nvidia-caps-imex-channels` major from the Character devices part, never assumed."""
    try:
        text = proc_devices.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    in_chars = False
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            in_chars = line.strip() == "Character devices:"
            continue
        parts = line.split()
        if in_chars and len(parts) == 2 and parts[1] == CHANNEL_DEVICE_NAME:
            return int(parts[0])
    return None


def clique_of(gpus: list[tuple[str, int, str]]) -> tuple[str, int | None]:
    """One clique for the tray only when every GPU reports the same completed one."""
    seen = {(cluster, clique) for state, clique, cluster in gpus}
    if not gpus or len(seen) != 1 or any(state != "COMPLETED" for state, _, _ in gpus):
        return "", None
    ((cluster, clique),) = seen
    if not cluster or cluster == ZERO_UUID:
        return "", None
    return cluster, clique


def fabric_verdict(gpus: list[Gpu]) -> tuple[str, int | None, list[Condition], bool]:
    """(cluster uuid, clique id, conditions, settled) of the tray from its GPUs."""
    cluster, clique = clique_of([(g.fabric_state, g.clique_id, g.cluster_uuid) for g in gpus])
    conditions: list[Condition] = []
    failed = [g for g in gpus if g.fabric_state == "FAILED"]
    pending = [g for g in gpus if g.fabric_state in PENDING_STATES]
    if failed:
        text = "; ".join(f"GPU {g.index} ({g.uuid}): {g.fabric_error or 'failed'}" for g in failed)
        conditions.append(
            _condition(
                ConditionType.FABRIC_FAILED,
                f"NVLink fabric registration failed: {text}. Check the NVLink switch trays' "
                "fabric manager and the GPU's NVLink health.",
            )
        )
    if pending:
        states = ", ".join(f"GPU {g.index} {g.fabric_state}" for g in pending)
        conditions.append(
            _condition(
                ConditionType.FABRIC_NOT_READY,
                f"NVLink fabric registration not finished ({states}); probing again.",
            )
        )
    completed = {(g.cluster_uuid, g.clique_id) for g in gpus if g.fabric_state == "COMPLETED"}
    if not failed and not pending and len(completed) > 1:
        names = ", ".join(sorted(f"{c}.{i}" for c, i in completed))
        conditions.append(
            _condition(
                ConditionType.FABRIC_INCONSISTENT,
                f"The tray's GPUs report different NVLink cliques ({names}).",
            )
        )
    return cluster, clique, conditions, not conditions


def _condition(kind: str, message: str, *, blocking: bool = True) -> Condition:
    return {"type": kind, "blocking": blocking, "message": message[:2000]}


# --- NVML ----------------------------------------------------------------------------------
_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}


def probe_nvml(driver: DriverRoot) -> tuple[list[Gpu], str]:
    """GPUs (with their fabric info) and the driver version, from the driver root's NVML."""
    library = driver.find_library()
    try:
        if library is not None:
            # Loaded by path, globally: pynvml's own dlopen of the bare soname then finds
            # this copy (the loader matches loaded objects by soname) instead of searching.
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        pynvml.nvmlInit()
    except OSError as exc:
        raise ProbeError(f"NVML unavailable: cannot load {library}: {exc}") from exc
    except pynvml.NVMLError as exc:
        where = library or (
            f"{NVML_LIBRARY} is neither under the driver root {driver.path} "
            f"({driver.searched()}) nor on the loader's path"
        )
        raise ProbeError(f"NVML unavailable: {exc} ({where})") from exc
    try:
        driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = [_gpu(index) for index in range(pynvml.nvmlDeviceGetCount())]
        return gpus, driver_version
    except (pynvml.NVMLError, OSError, ValueError) as exc:
        raise ProbeError(f"NVML query failed: {exc}") from exc
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _gpu(index: int) -> Gpu:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    state, clique, cluster, error = _fabric_info(pynvml, handle)
    return Gpu(
        index=index,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        product=_text(pynvml.nvmlDeviceGetName(handle)),
        fabric_state=state,
        cluster_uuid=cluster,
        clique_id=clique,
        fabric_error=error,
        vbios_version=_vbios(handle),
    )


def _vbios(handle: Any) -> str:
    try:
        return _text(pynvml.nvmlDeviceGetVbiosVersion(handle))[:40]
    except pynvml.NVMLError:  # not supported, or a stand-in without it
        return ""


def _fabric_info(nvml: Any, handle: Any) -> tuple[str, int, str, str]:
    """(state, clique id, cluster uuid, error) of one GPU.

    NVML fills a caller-owned struct (`nvmlDeviceGetGpuFabricInfo(device, &info)`); its
    `status` means something only once the state is COMPLETED, and a completed registration
    whose status is not NVML_SUCCESS failed: "FAILED" here, with NVML's words for it.
    """
    info = nvml.c_nvmlGpuFabricInfo_t()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
        return "NOT_SUPPORTED", 0, "", ""  # a GPU, or a driver, without multi-node NVLink
    except nvml.NVMLError as exc:
        if "Not Supported" in str(exc):
            return "NOT_SUPPORTED", 0, "", ""
        raise
    state = _STATES.get(int(info.state), "NOT_SUPPORTED")
    error = ""
    if state == "COMPLETED" and int(info.status) != nvml.NVML_SUCCESS:
        state = "FAILED"
        error = _text(nvml.nvmlErrorString(int(info.status)))
    cluster = str(uuid.UUID(bytes=bytes(info.clusterUuid)))
    return state, int(info.cliqueId), cluster, error


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# --- the emulator's stand-in for NVML ---------------------------------------------------------
def probe_facts_file(path: Path) -> tuple[list[Gpu], str]:
    """The same facts from a JSON file (`run/nvidia-emu/fabric.json` of an emulated tray).

    `{"cluster_uuid", "clique_id", "driver_version", "gpus": [{"index", "uuid", "product",
    "fabric_state", "fabric_error"?, "cluster_uuid"?, "clique_id"?, "vbios_version"?,
    "health"?}], "nvml_error"?}` (`health`: `nodeagent.gpuhealth.FileHealth`): a
    GPU's own cluster/clique overrides the tray's; `nvml_error` makes NVML fail with it.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError) as exc:
        raise ProbeError(f"NVML unavailable: fabric facts {path}: {exc}") from exc
    if doc.get("nvml_error"):
        raise ProbeError(f"NVML unavailable: {doc['nvml_error']}")
    gpus = [
        Gpu(
            index=int(g["index"]),
            uuid=str(g["uuid"]),
            product=str(g.get("product", "")),
            fabric_state=str(g.get("fabric_state", "COMPLETED")),
            cluster_uuid=str(g.get("cluster_uuid", doc.get("cluster_uuid", ""))),
            clique_id=int(g.get("clique_id", doc.get("clique_id") or 0)),
            fabric_error=str(g.get("fabric_error", "")),
            vbios_version=str(g.get("vbios_version", "")),
        )
        for g in doc.get("gpus", [])
    ]
    return gpus, str(doc.get("driver_version", ""))


def probe(
    *,
    proc_devices: Path,
    hostname: str,
    ip: str,
    driver: DriverRoot,
    facts_file: Path | None = None,
) -> Facts:
    """Everything the tray says about itself now; never raises (failures are conditions)."""
    conditions: list[Condition] = []
    gpus: list[Gpu] = []
    driver_version = ""
    nvml_ok = True
    try:
        gpus, driver_version = probe_facts_file(facts_file) if facts_file else probe_nvml(driver)
    except ProbeError as exc:
        nvml_ok = False
        conditions.append(_condition(ConditionType.NVML_UNAVAILABLE, str(exc)))
    cluster, clique, fabric_conditions, fabric_settled = fabric_verdict(gpus)
    major = channel_major(proc_devices)
    if major is None:
        conditions.append(
            _condition(
                ConditionType.IMEX_CHANNELS_MISSING,
                f"No '{CHANNEL_DEVICE_NAME}' in the character devices of {proc_devices}: the "
                "NVIDIA kernel module is not loaded, or too old for IMEX channels.",
            )
        )
    try:
        imex_mgmt(proc_devices.parent.parent)  # <root>/proc/devices → <root>
    except CapabilityError as exc:
        conditions.append(_condition(ConditionType.IMEX_MGMT_MISSING, str(exc)))
    return Facts(
        hostname=hostname or socket.gethostname(),
        ip=ip,
        gpus=gpus,
        cluster_uuid=cluster,
        clique_id=clique,
        driver_version=driver_version,
        channel_major=major,
        conditions=conditions + fabric_conditions,
        settled=nvml_ok and fabric_settled and major is not None,
    )
