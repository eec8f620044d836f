"""What a GPU's health readings mean: the alerts that make its tray need attention.

A GPU needs attention while it has had an XID critical error, or its NVLink error counters
have risen, within `PORTAL_GPU_ALERT_S` (an hour by default), or while it runs at or above
`PORTAL_GPU_HOT_C`. Each alert says what, in an operator's words, and since when. Pure
functions of a GPU's columns, so the tray page, the drawings, the needs-attention list and
`/metrics` say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

XID = "xid"
NVLINK = "nvlink"
HOT = "hot"
# The letter each alert puts on a GPU in the drawings, most serious first.
MARKS = {XID: "X", NVLINK: "L", HOT: "H"}
# The columns `gpu_alerts` reads, in its arguments' order (for `values_list`).
ALERT_FIELDS = ("telemetry__last_xid", "xid_since", "xid_at", "nvlink_since", "nvlink_at",
                "temperature_c", "hot_since")  # fmt: skip


@dataclass(frozen=True)
class GpuAlert:
    kind: str  # XID | NVLINK | HOT
    words: str  # "XID 79", "NVLink errors rising", "93 °C"
    since: datetime


def alert_window() -> timedelta:
    return timedelta(seconds=settings.PORTAL["GPU_ALERT_S"])


def hot_c() -> int:
    return int(settings.PORTAL["GPU_HOT_C"])


def gpu_alerts(
    last_xid: Any,
    xid_since: datetime | None,
    xid_at: datetime | None,
    nvlink_since: datetime | None,
    nvlink_at: datetime | None,
    temperature_c: int | None,
    hot_since: datetime | None,
    *,
    now: datetime,
) -> list[GpuAlert]:
    """The GPU's alerts now, most serious first (arguments: `ALERT_FIELDS`)."""
    cut = now - alert_window()
    alerts = []
    if xid_at is not None and xid_at >= cut:
        code = f"XID {last_xid}" if last_xid else "XID"
        alerts.append(GpuAlert(XID, code, xid_since or xid_at))
    if nvlink_at is not None and nvlink_at >= cut:
        alerts.append(GpuAlert(NVLINK, "NVLink errors rising", nvlink_since or nvlink_at))
    if temperature_c is not None and temperature_c >= hot_c():
        alerts.append(GpuAlert(HOT, f"{temperature_c} °C", hot_since or now))
    return alerts


def alert_words(alerts: list[GpuAlert]) -> str:
    return ", ".join(a.words for a in alerts)


NVLINK_COUNTERS = ("nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors",
                   "nvlink_recovery_errors")  # fmt: skip


def nvlink_total(sample: Any) -> int | None:
    """The sum of a sample's NVLink error counters; None when it has none of them."""
    known = [sample.get(n) for n in NVLINK_COUNTERS if sample.get(n) is not None]
    return sum(known) if known else None


@dataclass(frozen=True)
class GpuReading:
    """One GPU's last health readings as a page shows them."""

    gpu: Any  # inventory.models.Gpu (a model would import this module)
    alerts: list[GpuAlert]

    @property
    def sample(self) -> dict[str, Any]:
        return self.gpu.telemetry or {}

    @property
    def power_w(self) -> float | None:
        milliwatts = self.sample.get("power_mw")
        return None if milliwatts is None else round(milliwatts / 1000, 1)

    @property
    def nvlink_errors(self) -> int | None:
        return nvlink_total(self.sample)


def gpu_readings(gpus: Any, *, now: datetime) -> list[GpuReading]:
    """The readings of `gpus` (Gpu rows), each with its alerts now."""
    return [
        GpuReading(g, gpu_alerts(*(_column(g, f) for f in ALERT_FIELDS), now=now)) for g in gpus
    ]


def _column(gpu: Any, name: str) -> Any:
    if name.startswith("telemetry__"):
        return (gpu.telemetry or {}).get(name.removeprefix("telemetry__"))
    return getattr(gpu, name)
