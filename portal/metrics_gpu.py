"""The GPUs' health in `/metrics`, under the names NVIDIA's DCGM exporter gives the same
readings, so dashboards and alerts written for DCGM read the portal's too.

Each series carries DCGM's labels for a GPU: `gpu` (the index), `UUID` and `Hostname` (the
tray's hostname, which is the Kubernetes Node name). The readings are what each tray's
agent last sent through NVML (about once a minute): a GPU whose readings are older than
`FRESH` (its agent silent, its tray down) is left out rather than shown at its last value.

- `DCGM_FI_DEV_GPU_TEMP` (°C), `DCGM_FI_DEV_POWER_USAGE` (W), `DCGM_FI_DEV_XID_ERRORS` (the
  last XID's code, 0 for none): gauges, as in DCGM's default counters.
- `DCGM_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL` and
  `DCGM_FI_DEV_ECC_{SBE,DBE}_VOL_TOTAL`: counts that only grow while the driver stays
  loaded. DCGM declares them counters, but Prometheus wants a counter's name to end in
  `_total` (lower case), so they are declared gauges here: the name is what joins, and
  `rate()` and `increase()` read them all the same.
- `portal_gpu_alert{UUID, gpu, Hostname, kind}`: 1 for each alert that makes a GPU need
  attention (`xid`, `nvlink`, `hot`; `domains.inventory.gpuhealth`).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from domains.inventory.gpuhealth import ALERT_FIELDS, gpu_alerts
from domains.inventory.models import Gpu, NodeState

FRESH = timedelta(minutes=5)
LABELS = ["gpu", "UUID", "Hostname"]
GAUGES = (
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c", 1),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_mw", 1000),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "last_xid", 1),
)
COUNTS = (
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
     "Total number of NVLink flow-control CRC errors.", "nvlink_crc_flit_errors"),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
     "Total number of NVLink data CRC errors.", "nvlink_crc_data_errors"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
     "Total number of NVLink retries.", "nvlink_replay_errors"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
     "Total number of NVLink recovery errors.", "nvlink_recovery_errors"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
     "Total number of single-bit volatile ECC errors.", "ecc_corrected"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
     "Total number of double-bit volatile ECC errors.", "ecc_uncorrected"),
)  # fmt: skip


class GpuHealthCollector(Collector):
    """Each GPU's last readings, in one query."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        rows = list(
            Gpu.objects.filter(telemetry_at__gte=now - FRESH, node__gone=False)
            .exclude(node__state=NodeState.DOWN)
            .order_by("node__hostname", "index")
            .values_list("index", "uuid", "node__hostname", "telemetry", *ALERT_FIELDS)
        )
        families = [GaugeMetricFamily(n, h, labels=LABELS) for n, h, _, _ in GAUGES]
        counts = [GaugeMetricFamily(n, h, labels=LABELS) for n, h, _ in COUNTS]
        alert = GaugeMetricFamily(
            "portal_gpu_alert",
            "A GPU needs attention (value 1): an XID or rising NVLink errors within the "
            "alert window, or running hot; `kind` says which.",
            labels=[*LABELS, "kind"],
        )
        for index, uuid, hostname, sample, *alerting in rows:
            labels = [str(index), uuid, hostname]
            for family, (_, _, key, scale) in zip(families, GAUGES, strict=True):
                if sample.get(key) is not None:
                    family.add_metric(labels, sample[key] / scale)
            for count, (_, _, key) in zip(counts, COUNTS, strict=True):
                if sample.get(key) is not None:
                    count.add_metric(labels, sample[key])
            for found in gpu_alerts(*alerting, now=now):
                alert.add_metric([*labels, found.kind], 1)
        yield from families
        yield from counts
        yield alert
