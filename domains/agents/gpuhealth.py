"""The GPUs' health as a tray's agent reads it (`gpu_health` in a status report, about once a
minute): recorded on each GPU with what it means (`domains.inventory.gpuhealth`).

XIDs count as new when the agent's count of them went up (or, after the agent restarted
and its count began again, is not zero); NVLink errors rise when the sum of the NVLink
error counters went up since the GPU's previous sample (NVML counts from the driver's
load, so an agent's restart changes nothing; a GPU's first sample only sets where
counting starts). An alert that is back within the alert
window keeps its first "since". The trays whose alerts changed are announced, so the
drawings and the needs-attention list change with them.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agentwire.gpuhealth import GpuHealthSample
from domains.inventory.gpuhealth import alert_window, gpu_readings, hot_c, nvlink_total
from domains.inventory.models import Gpu
from domains.signals import announce_nodes

WRITTEN = ("telemetry", "telemetry_at", "temperature_c", "xid_since", "xid_at",
           "nvlink_since", "nvlink_at", "hot_since")  # fmt: skip


def gpu_health_record(
    *, node_id: int, samples: list[GpuHealthSample], now: datetime | None = None
) -> None:
    """Record a tray's GPU health samples (matched to its GPUs by index and UUID)."""
    now = now or timezone.now()
    by_index = {s["index"]: s for s in samples}
    with transaction.atomic():
        gpus = list(
            Gpu.objects.select_for_update()
            .filter(node_id=node_id, index__in=by_index)
            .order_by("index")
        )
        before = [_kinds(g, now) for g in gpus]
        for gpu in gpus:
            sample = by_index[gpu.index]
            if sample["uuid"] == gpu.uuid:
                _take(gpu, sample, now)
        Gpu.objects.bulk_update(gpus, WRITTEN)
    if before != [_kinds(g, now) for g in gpus]:
        announce_nodes([node_id])


def _kinds(gpu: Gpu, now: datetime) -> list[str]:
    return [a.kind for a in gpu_readings([gpu], now=now)[0].alerts]


def _take(gpu: Gpu, sample: GpuHealthSample, now: datetime) -> None:
    before = gpu.telemetry or {}
    cut = now - alert_window()
    count, was = sample["xid_count"], before.get("xid_count", 0)
    if count > was or (count < was and count > 0):
        gpu.xid_since = gpu.xid_since if gpu.xid_at and gpu.xid_at >= cut else now
        gpu.xid_at = now
    errors, had = nvlink_total(sample), nvlink_total(before)
    if errors is not None and had is not None and errors > had:
        gpu.nvlink_since = gpu.nvlink_since if gpu.nvlink_at and gpu.nvlink_at >= cut else now
        gpu.nvlink_at = now
    temperature = sample["temperature_c"]
    hot = temperature is not None and temperature >= hot_c()
    gpu.hot_since = (gpu.hot_since or now) if hot else None
    gpu.temperature_c = temperature
    gpu.telemetry = dict(sample)
    gpu.telemetry_at = now
