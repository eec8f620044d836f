# SPDX-License-Identifier: Apache-2.0
"""Fabric probe: GPUs, NVLink clique and driver version (NVML), channel major (/proc/devices).

A clique is `<clusterUuid>.<cliqueId>` from NVML's GPU fabric info. "Not supported" (PCIe
GPUs) or an all-zero cluster uuid (HGX H100) both mean the tray has no multi-node NVLink;
fabric info is meaningful only once its state is COMPLETED.
"""

from __future__ import annotations

import ctypes
import json
import socket
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CHANNEL_DEVICE_NAME = "nvidia-caps-imex-channels"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


class ProbeError(RuntimeError):
    """The tray's facts cannot be read (no driver, unreadable /proc/devices…)."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    product: str
    fabric_state: str  # NOT_SUPPORTED | NOT_STARTED | IN_PROGRESS | COMPLETED | FAILED


@dataclass(frozen=True)
class Facts:
    """What the agent registers with the portal when it joins."""

    hostname: str
    ip: str
    gpus: list[Gpu] = field(default_factory=list)
    cluster_uuid: str = ""  # "" when the tray has no multi-node NVLink
    clique_id: int | None = None
    driver_version: str = ""
    channel_major: int | None = None
    channel_count: int = 2048

    @property
    def clique(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}" if self.cluster_uuid else ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def probe_nvml() -> tuple[list[Gpu], str, int | None, str]:
    """GPUs, cluster uuid, clique id and driver version from the NVIDIA driver."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ProbeError("nvidia-ml-py is not installed") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise ProbeError(f"NVML unavailable: {exc}") from exc
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus: list[Gpu] = []
        fabric: list[tuple[str, int, str]] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            state, clique, cluster = _fabric_info(pynvml, handle)
            gpus.append(
                Gpu(
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    product=_text(pynvml.nvmlDeviceGetName(handle)),
                    fabric_state=state,
                )
            )
            fabric.append((state, clique, cluster))
        cluster_uuid, clique_id = clique_of(fabric)
        return gpus, cluster_uuid, clique_id, driver
    finally:
        pynvml.nvmlShutdown()


_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}


def _fabric_info(pynvml: Any, handle: Any) -> tuple[str, int, str]:
    """(state, clique id, cluster uuid) of one GPU.

    NVML fills a caller-owned struct (`nvmlDeviceGetGpuFabricInfo(device, &info)`); its
    `status` means something only once the state is COMPLETED, and a completed registration
    that failed leaves the GPU outside any clique ("FAILED" here).
    """
    info = pynvml.c_nvmlGpuFabricInfo_t()
    try:
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except pynvml.NVMLError_NotSupported:
        return "NOT_SUPPORTED", 0, ""
    except pynvml.NVMLError as exc:
        if "Not Supported" in str(exc):
            return "NOT_SUPPORTED", 0, ""
        raise
    state = _STATES.get(int(info.state), "NOT_SUPPORTED")
    if state == "COMPLETED" and int(info.status) != pynvml.NVML_SUCCESS:
        state = "FAILED"
    cluster = str(uuid.UUID(bytes=bytes(info.clusterUuid)))
    return state, int(info.cliqueId), cluster


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def probe_facts_file(path: Path) -> tuple[list[Gpu], str, int | None, str]:
    """The emulator's stand-in for NVML: the same facts, from `run/nvidia-emu/fabric.json`."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError) as exc:
        raise ProbeError(f"fabric facts {path}: {exc}") from exc
    gpus = [
        Gpu(
            index=int(g["index"]),
            uuid=g["uuid"],
            product=g.get("product", ""),
            fabric_state=g.get("fabric_state", "COMPLETED"),
        )
        for g in doc.get("gpus", [])
    ]
    fabric = [
        (g.fabric_state, int(doc.get("clique_id") or 0), doc.get("cluster_uuid", "")) for g in gpus
    ]
    cluster_uuid, clique_id = clique_of(fabric)
    return gpus, cluster_uuid, clique_id, doc.get("driver_version", "")


def probe(*, proc_devices: Path, hostname: str, ip: str, facts_file: Path | None = None) -> Facts:
    gpus, cluster_uuid, clique_id, driver = (
        probe_facts_file(facts_file) if facts_file else probe_nvml()
    )
    return Facts(
        hostname=hostname or socket.gethostname(),
        ip=ip,
        gpus=gpus,
        cluster_uuid=cluster_uuid,
        clique_id=clique_id,
        driver_version=driver,
        channel_major=channel_major(proc_devices),
    )
