# SPDX-License-Identifier: Apache-2.0
"""An emulated tray's world under its root: /proc/devices, the loaded driver's version, NVML
fabric facts and GPU health, fault knobs (a sick GPU among them), and what its emulated
IMEX daemon leaves for tests to read.

The agent reads `<root>/proc/devices` exactly as on a real tray and, with `--fabric-facts`,
takes the GPUs and clique from `run/nvidia-emu/fabric.json` instead of NVML. The emulated
`nvidia-imex` reads `<root>/proc/driver/nvidia/version` (it refuses to start on a
mismatch) and resolves host names through `<root>/etc/hosts`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.driver import IMEX_MGMT_CAPABILITY

BIN_DIR = Path(__file__).resolve().parent / "bin"
IMEX_BIN = str(BIN_DIR / "nvidia-imex")
IMEX_CTL_BIN = str(BIN_DIR / "nvidia-imex-ctl")
EMU_DIR = Path("run") / "nvidia-emu"
BOOT_ID = Path("proc/sys/kernel/random/boot_id")

# The rest of a typical /proc/devices; the IMEX channel line is inserted among them.
_CHAR_DEVICES = [
    (1, "mem"),
    (4, "/dev/vc/0"),
    (4, "tty"),
    (5, "/dev/tty"),
    (10, "misc"),
    (195, "nvidia"),
    (195, "nvidiactl"),
    (508, "nvidia-caps"),
    (509, "nvidia-nvswitch"),
    (510, "nvidia-uvm"),
]
_BLOCK_DEVICES = [(7, "loop"), (8, "sd"), (259, "blkext")]


VBIOS_VERSION = "97.00.B9.00.12"  # a GB200's, as nvidia-smi prints it


def healthy_gpu(index: int = 0) -> dict[str, Any]:
    """What NVML says of a healthy GB200 at work (`nodeagent.gpuhealth.FileHealth`)."""
    return {
        "temperature_c": 41 + index,
        "power_mw": 612_000 + 1_000 * index,
        "xids": [],
        "nvlink_errors": {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0},
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
    }


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: str
    product: str = "NVIDIA GB200"
    fabric_state: str = "COMPLETED"
    vbios_version: str = VBIOS_VERSION
    health: dict[str, Any] = field(default_factory=dict)  # {}: healthy_gpu(index)


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
    # The fabric-imex-mgmt capability's minor under nvidia-caps; None: the driver has none.
    imex_mgmt_minor: int | None = 4323


def channel_major_for(hostname: str) -> int:
    """A dynamic-looking major in 234..253 that differs between trays, as on real nodes."""
    return 234 + zlib.crc32(hostname.encode()) % 20


def prepare_tray(root: Path, facts: TrayFacts, faults: dict[str, Any] | None = None) -> Path:
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
    for gpu in document["gpus"]:
        gpu["health"] = gpu["health"] or healthy_gpu(gpu["index"])
    write_atomic(emu / "fabric.json", json.dumps(document, indent=2) + "\n")
    write_driver_version(root, facts.driver_version)
    if facts.imex_mgmt_minor is not None:
        write_capability(root, facts.imex_mgmt_minor)
    if not (root / BOOT_ID).exists():
        write_boot_id(root)
    if faults is not None:
        set_faults(root, faults)
    return root


def write_boot_id(root: Path) -> str:
    """A fresh `proc/sys/kernel/random/boot_id`, as the kernel makes one at every boot."""
    boot_id = str(uuid.uuid4())
    path = Path(root) / BOOT_ID
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, boot_id + "\n")
    return boot_id


def reboot_tray(root: Path) -> str:
    """What a reboot does to the tray's files: a new boot id, and tmpfs emptied (the
    per-claim CDI specs under /var/run/cdi, the channel device nodes under /dev)."""
    for tmpfs in ("var/run/cdi", "dev/nvidia-caps-imex-channels"):
        shutil.rmtree(Path(root) / tmpfs, ignore_errors=True)
    return write_boot_id(root)


def write_capability(root: Path, minor: int) -> None:
    """`proc/driver/nvidia/capabilities/fabric-imex-mgmt` as the kernel module words it."""
    path = Path(root) / IMEX_MGMT_CAPABILITY
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"DeviceFileMinor: {minor}\nDeviceFileMode: 256\nDeviceFileModify: 1\n")


def write_driver_version(root: Path, version: str) -> None:
    """`proc/driver/nvidia/version` as the loaded kernel module words it (GB200: aarch64)."""
    path = Path(root) / "proc/driver/nvidia/version"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(
        path,
        f"NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  {version}  Release Build  "
        "(dvs-builder@U22-I3-AM25-27-2)  Wed Aug 27 20:18:35 UTC 2025\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
    )


# What the demo's tray control asks of a tray (`trayctl`; the fleet follows it).
CONTROL_FILE = "demo-control.json"


def read_faults(root: Path) -> dict[str, Any]:
    """The tray's fault knobs as set now ({} when none)."""
    try:
        faults = json.loads((Path(root) / EMU_DIR / "faults.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return faults if isinstance(faults, dict) else {}


def sicken_gpu(
    root: Path,
    index: int,
    *,
    xids: tuple[int, ...] = (79,),
    nvlink_errors_per_s: float = 40.0,
    temperature_c: int | None = 93,
) -> None:
    """Make one GPU of the tray sick, as its NVML would tell: `xids` happen now (79: the
    GPU fell off the bus), its NVLink CRC errors start rising at `nvlink_errors_per_s`, and
    it runs hot. The agent reads it at its next GPU-health sample."""

    def change(gpu: dict[str, Any]) -> None:
        health = gpu.setdefault("health", healthy_gpu(index))
        health["xids"] = [*health.get("xids", []), *xids]
        if nvlink_errors_per_s:
            health["nvlink_errors_per_s"] = nvlink_errors_per_s
            health["since"] = time.time()
        if temperature_c is not None:
            health["temperature_c"] = temperature_c

    _change_gpu(root, index, change)


def heal_gpu(root: Path, index: int) -> None:
    """The GPU healthy again (its XIDs are history: NVML's counters do not go back)."""

    def change(gpu: dict[str, Any]) -> None:
        old = gpu.get("health") or {}
        gpu["health"] = healthy_gpu(index) | {"xids": old.get("xids", [])}

    _change_gpu(root, index, change)


def set_gpu_facts(root: Path, **facts: Any) -> None:
    """Change what NVML says of every GPU of the tray (e.g. `vbios_version`) and, with
    `driver_version`, the loaded driver's version: the agent re-sends its facts when it
    probes again (a restart)."""
    path = Path(root) / EMU_DIR / "fabric.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    if "driver_version" in facts:
        doc["driver_version"] = facts.pop("driver_version")
        write_driver_version(root, doc["driver_version"])
    for gpu in doc.get("gpus", []):
        gpu.update(facts)
    write_atomic(path, json.dumps(doc, indent=2) + "\n")


def _change_gpu(root: Path, index: int, change: Callable[[dict[str, Any]], None]) -> None:
    path = Path(root) / EMU_DIR / "fabric.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    (gpu,) = [g for g in doc["gpus"] if g["index"] == index]
    change(gpu)
    write_atomic(path, json.dumps(doc, indent=2) + "\n")


def set_faults(root: Path, faults: dict[str, Any]) -> None:
    """Fault knobs (see imexd.py). A daemon already running re-reads them at once (SIGUSR2)."""
    path = Path(root) / EMU_DIR / "faults.json"
    if faults:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(faults) + "\n")
    elif path.exists():
        path.unlink()
    pid = daemon_pid(root)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR2)


def daemon_pid(root: Path) -> int | None:
    """The emulated daemon holding this tray, or None when none runs.

    Read from the pid it wrote into its lock file, and checked against /proc rather than by
    trying the lock: a probe holding the lock even briefly could make a daemon starting at
    that moment fail with NV_ERR_IN_USE."""
    try:
        words = (Path(root) / EMU_DIR / "imex.lock").read_text().split()
    except FileNotFoundError:
        return None
    if len(words) != 2 or words[0] != "running" or not words[1].isdigit():
        return None
    if _tray_daemon(int(words[1]), root):
        return int(words[1])
    # The pid as the daemon's own PID namespace numbers it (a runner's pod): here it may
    # name an unrelated process, so the daemon is looked for by its command line.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _tray_daemon(int(entry.name), root):
            return int(entry.name)
    return None


def _tray_daemon(pid: int, root: Path) -> bool:
    """A live emulated daemon started on a config under this tray's root."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    under = (f"{root}/".encode(), f"{Path(root).resolve()}/".encode())
    return b"imex.py" in cmdline and any(r in cmdline for r in under) and state != "Z"


def daemon_starts(root: Path) -> int:
    """How many daemon instances have taken this tray (one line each in `starts`)."""
    path = Path(root) / EMU_DIR / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
