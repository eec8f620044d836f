# SPDX-License-Identifier: Apache-2.0
"""An emulated tray's hardware facts under its root: /proc/devices and NVML fabric facts.

The agent reads `<root>/proc/devices` exactly as on a real tray and, with `--fabric-facts`,
takes the GPUs and clique from `run/nvidia-emu/fabric.json` instead of NVML.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

BIN_DIR = Path(__file__).resolve().parent / "bin"
IMEX_BIN = str(BIN_DIR / "nvidia-imex")
IMEX_CTL_BIN = str(BIN_DIR / "nvidia-imex-ctl")
EMU_DIR = Path("run") / "nvidia-emu"

# The rest of a typical /proc/devices; the IMEX channel line is inserted among them.
_CHAR_DEVICES = [
    (1, "mem"),
    (4, "/dev/vc/0"),
    (4, "tty"),
    (5, "/dev/tty"),
    (10, "misc"),
    (195, "nvidia"),
    (195, "nvidiactl"),
    (509, "nvidia-nvswitch"),
    (510, "nvidia-uvm"),
]
_BLOCK_DEVICES = [(7, "loop"), (8, "sd"), (259, "blkext")]


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: str
    product: str = "NVIDIA GB200"
    fabric_state: str = "COMPLETED"


@dataclass(frozen=True)
class TrayFacts:
    """What NVML and /proc say about one tray. An empty cluster_uuid: no multi-node NVLink."""

    hostname: str
    ip: str
    cluster_uuid: str
    clique_id: int
    gpus: list[GpuFacts] = field(default_factory=list)
    driver_version: str = "580.82.07"
    channel_major: int = 0  # 0: derive a per-tray major (majors differ between nodes)
    channel_count: int = 2048


def channel_major_for(hostname: str) -> int:
    """A dynamic-looking major in 234..253 that differs between trays, as on real nodes."""
    return 234 + zlib.crc32(hostname.encode()) % 20


def prepare_tray(root: Path, facts: TrayFacts, faults: dict | None = None) -> Path:
    """Write the tray's /proc/devices and fabric facts (and fault knobs); returns the root."""
    root = Path(root)
    major = facts.channel_major or channel_major_for(facts.hostname)
    chars = sorted([*_CHAR_DEVICES, (major, "nvidia-caps-imex-channels")])
    lines = ["Character devices:"]
    lines += [f"{num:3d} {name}" for num, name in chars]
    lines += ["", "Block devices:"]
    lines += [f"{num:3d} {name}" for num, name in _BLOCK_DEVICES]
    (root / "proc").mkdir(parents=True, exist_ok=True)
    write_atomic(root / "proc" / "devices", "\n".join(lines) + "\n")
    emu = root / EMU_DIR
    emu.mkdir(parents=True, exist_ok=True)
    document = asdict(facts) | {"channel_major": major}
    write_atomic(emu / "fabric.json", json.dumps(document, indent=2) + "\n")
    if faults is not None:
        set_faults(root, faults)
    return root


def set_faults(root: Path, faults: dict) -> None:
    """Fault knobs the emulated daemon reads when it starts (see imex.py)."""
    path = Path(root) / EMU_DIR / "faults.json"
    if faults:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(faults) + "\n")
    elif path.exists():
        path.unlink()


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
