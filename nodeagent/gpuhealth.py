# SPDX-License-Identifier: Apache-2.0
"""GPU health: each GPU's temperature, power, XID events, NVLink and ECC error counters,
read through NVML and sent with one status report every `gpu_health_interval`.

NVML stays initialised while the agent runs: XID critical errors reach only an event set
registered before they happen (`nvmlEventSetCreate`, `nvmlDeviceRegisterEvents(...,
nvmlEventTypeXidCriticalError, ...)`), and each sample drains it without waiting
(`nvmlEventSetWait_v2(set, 0)` until NVML says Timeout). The counters are NVML's own:
`nvmlDeviceGetFieldValues` for the NVLink totals over all links (the fields DCGM exports
as DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL) and `nvmlDeviceGetTotalEccErrors` for the
volatile ECC counts. A value NVML does not give (a GPU without NVLink, ECC off, an old
driver) is null, never 0.

On an emulated tray (`--fabric-facts`) the same sample comes from the tray's
`fabric.json`, where a GPU's `health` says what its NVML would (see `FileHealth`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pynvml

from agentwire.gpuhealth import GpuHealthSample
from nodeagent.driver import DriverRoot

# NVML field ids → the sample's counters (nvml.h: NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL).
NVLINK_FIELDS = {
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: "nvlink_crc_flit_errors",
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: "nvlink_crc_data_errors",
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: "nvlink_replay_errors",
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: "nvlink_recovery_errors",
}
FILE_NVLINK = {"crc_flit": "nvlink_crc_flit_errors", "crc_data": "nvlink_crc_data_errors",
               "replay": "nvlink_replay_errors", "recovery": "nvlink_recovery_errors"}  # fmt: skip


def sample(index: int, uuid: str, **values: Any) -> GpuHealthSample:
    """A GPU's sample with every counter it does not give as null."""
    doc: dict[str, Any] = {
        "index": index,
        "uuid": uuid,
        "temperature_c": None,
        "power_mw": None,
        "xid_count": 0,
        "last_xid": 0,
        **dict.fromkeys(NVLINK_FIELDS.values()),
        "ecc_corrected": None,
        "ecc_uncorrected": None,
    }
    doc.update(values)
    return cast(GpuHealthSample, doc)


def _maybe(read: Callable[..., Any], *args: Any) -> Any:
    """NVML's answer, or None where it has none (not supported, no such function)."""
    try:
        return read(*args)
    except pynvml.NVMLError:
        return None


class NvmlHealth:
    """The tray's GPUs through NVML, initialised once and kept so (see the module)."""

    def __init__(self, driver: DriverRoot) -> None:
        self.driver = driver
        self.handles: list[Any] | None = None
        self.events: Any = None
        self.xids: dict[int, tuple[int, int]] = {}  # index → (events seen, newest XID)

    def open(self) -> None:
        library = self.driver.find_library()
        if library is not None:
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)  # as the probe loads it
        pynvml.nvmlInit()
        self.handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for handle in self.handles:
                kind = pynvml.nvmlEventTypeXidCriticalError
                pynvml.nvmlDeviceRegisterEvents(handle, kind, self.events)
        except pynvml.NVMLError:
            self.events = None  # no XID events on this GPU or driver: none counted

    def read(self) -> list[GpuHealthSample]:
        if self.handles is None:
            self.open()
        assert self.handles is not None
        self._drain_xids()
        return [self._gpu(index, handle) for index, handle in enumerate(self.handles)]

    def _drain_xids(self) -> None:
        while self.events is not None:
            try:
                event = pynvml.nvmlEventSetWait_v2(self.events, 0)
            except pynvml.NVMLError:  # Timeout: nothing waiting (or the set is gone)
                return
            if event.eventType & pynvml.nvmlEventTypeXidCriticalError:
                index = pynvml.nvmlDeviceGetIndex(event.device)
                count, _ = self.xids.get(index, (0, 0))
                self.xids[index] = (count + 1, int(event.eventData))

    def _gpu(self, index: int, handle: Any) -> GpuHealthSample:
        count, last = self.xids.get(index, (0, 0))
        power = _maybe(pynvml.nvmlDeviceGetPowerUsage, handle)
        ecc = pynvml.NVML_VOLATILE_ECC
        values: dict[str, Any] = {
            "temperature_c": _maybe(
                pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU
            ),
            "power_mw": power,
            "xid_count": count,
            "last_xid": last,
            "ecc_corrected": _maybe(
                pynvml.nvmlDeviceGetTotalEccErrors,
                handle,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                ecc,
            ),
            "ecc_uncorrected": _maybe(
                pynvml.nvmlDeviceGetTotalEccErrors,
                handle,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                ecc,
            ),
        }
        fields = _maybe(pynvml.nvmlDeviceGetFieldValues, handle, list(NVLINK_FIELDS))
        for field in fields or []:
            if field.nvmlReturn == pynvml.NVML_SUCCESS:
                values[NVLINK_FIELDS[field.fieldId]] = int(field.value.ullVal)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        return sample(index, uuid.decode() if isinstance(uuid, bytes) else uuid, **values)

    def close(self) -> None:
        if self.handles is None:
            return
        with contextlib.suppress(pynvml.NVMLError):
            if self.events is not None:
                pynvml.nvmlEventSetFree(self.events)
            pynvml.nvmlShutdown()
        self.handles = self.events = None


class FileHealth:
    """The emulator's NVML: each GPU's `health` in the tray's fabric.json.

    `{"temperature_c", "power_mw", "xids": [<XID>, …] (every event since boot, oldest
    first), "nvlink_errors": {"crc_flit", "crc_data", "replay", "recovery"}, "ecc_corrected",
    "ecc_uncorrected", "nvlink_errors_per_s", "since"}`, each optional: a counter the
    hardware goes on counting is `nvlink_errors` plus `nvlink_errors_per_s` for every second
    since `since` (a Unix time), added to `crc_flit`, as a failing link's CRC errors are.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[GpuHealthSample]:
        doc = json.loads(self.path.read_text(encoding="utf-8"))
        return [self._gpu(g) for g in doc.get("gpus", [])]

    @staticmethod
    def _gpu(gpu: dict[str, Any]) -> GpuHealthSample:
        health = gpu.get("health") or {}
        xids = [int(x) for x in health.get("xids", [])]
        values: dict[str, Any] = {
            k: health[k]
            for k in ("temperature_c", "power_mw", "ecc_corrected", "ecc_uncorrected")
            if k in health
        }
        counters = health.get("nvlink_errors", {})
        for name, field in FILE_NVLINK.items():
            if name in counters:
                values[field] = int(counters[name])
        rate = float(health.get("nvlink_errors_per_s", 0))
        if rate:
            grown = int(rate * max(0.0, time.time() - float(health.get("since", time.time()))))
            values["nvlink_crc_flit_errors"] = int(counters.get("crc_flit", 0)) + grown
        return sample(
            int(gpu["index"]),
            str(gpu["uuid"]),
            xid_count=len(xids),
            last_xid=xids[-1] if xids else 0,
            **values,
        )

    def close(self) -> None:
        pass


class GpuHealth:
    """When the next sample is due, and the reader it comes from."""

    def __init__(self, driver: DriverRoot, facts_file: Path | None, interval: float) -> None:
        self.reader: NvmlHealth | FileHealth = (
            FileHealth(facts_file) if facts_file is not None else NvmlHealth(driver)
        )
        self.interval = interval
        self.next_at = 0.0
        self.failed = ""

    def due(self, now: float) -> list[GpuHealthSample] | None:
        """A sample when one is due (and NVML gives it), else None."""
        if self.interval <= 0 or now < self.next_at:
            return None
        try:
            found = self.reader.read()
        except (pynvml.NVMLError, OSError, ValueError, KeyError, TypeError) as exc:
            self.failed = str(exc)  # the facts' conditions say why NVML is away
            self.reader.close()
            self.next_at = now + self.interval
            return None
        self.failed = ""
        return found

    def sent(self, now: float) -> None:
        """The portal has the sample: the next is due an interval from now."""
        self.next_at = now + self.interval

    def close(self) -> None:
        self.reader.close()
