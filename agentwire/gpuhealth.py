# SPDX-License-Identifier: Apache-2.0
"""Part of the agent ↔ portal contract (`agentwire.messages`): one GPU's health as the agent
reads it through NVML, carried now and then in the status report (`gpu_health`)."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from agentwire.schema import wire


def _int(minimum: int, maximum: int) -> Any:
    return wire(minimum=minimum, maximum=maximum)


def _count(description: str) -> Any:
    """A counter NVML keeps, or null where the GPU or driver does not give it."""
    return wire(None, description=description)


Counter = Annotated[int, _int(0, 2**63 - 1)] | None


class GpuHealthSample(TypedDict):
    """One GPU's health as NVML reads it now; null where NVML does not give a value."""

    index: Annotated[int, wire(minimum=0, maximum=63, description="NVML's GPU index.")]
    uuid: Annotated[str, wire(minLength=1, maxLength=64, description="The GPU's UUID.")]
    temperature_c: Annotated[
        Annotated[int, _int(0, 200)] | None,
        wire(None, description="GPU core temperature (°C; nvmlDeviceGetTemperature)."),
    ]
    power_mw: Annotated[
        Annotated[int, _int(0, 10_000_000)] | None,
        wire(None, description="Power draw (milliwatts; nvmlDeviceGetPowerUsage)."),
    ]
    xid_count: Annotated[
        int,
        wire(
            0,
            minimum=0,
            description="XID critical-error events seen since the agent started "
            "(nvmlEventTypeXidCriticalError).",
        ),
    ]
    last_xid: Annotated[
        int, wire(0, minimum=0, maximum=2**31 - 1, description="The newest XID's code; 0: none.")
    ]
    nvlink_crc_flit_errors: Annotated[
        Counter, _count("NVLink flow-control CRC errors, all links (NVML field 38).")
    ]
    nvlink_crc_data_errors: Annotated[
        Counter, _count("NVLink data CRC errors, all links (NVML field 45).")
    ]
    nvlink_replay_errors: Annotated[Counter, _count("NVLink replays, all links (field 52).")]
    nvlink_recovery_errors: Annotated[
        Counter, _count("NVLink recoveries, all links (NVML field 59).")
    ]
    ecc_corrected: Annotated[
        Counter, _count("Corrected (single-bit) ECC errors since the driver loaded (volatile).")
    ]
    ecc_uncorrected: Annotated[
        Counter, _count("Uncorrected (double-bit) ECC errors since the driver loaded (volatile).")
    ]
