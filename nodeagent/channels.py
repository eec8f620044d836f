# SPDX-License-Identifier: Apache-2.0
"""IMEX channel device nodes and the CDI spec that hands them to containers.

`/dev/nvidia-caps-imex-channels/channel<N>` is a char device with the tray's dynamic
`nvidia-caps-imex-channels` major (from /proc/devices, never hard-coded) and minor N. The
driver creates none by default; they vanish on reboot. Creating them is idempotent, and any
node the current domain does not own is removed (stale ones are wiped at agent start).

Channel sets travel compactly: `{"mode": "Single", "numbers": [7]}` or, for `All`,
`{"mode": "All", "first": 1, "last": 2047}`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from nodeagent.config import CDI_KIND, CHANNELS_DIR
from nodeagent.files import remove, write_atomic

CDI_VERSION = "0.6.0"
HOST_MODE = 0o600  # root on the host; containers get them through CDI (fileMode below)
CONTAINER_MODE = 0o666


class ChannelError(RuntimeError):
    pass


def channel_numbers(spec: dict[str, Any] | None) -> list[int]:
    """The channel numbers a desired-state channel spec names."""
    if not spec:
        return []
    if spec.get("mode") == "All":
        return list(range(int(spec["first"]), int(spec["last"]) + 1))
    return sorted({int(n) for n in spec.get("numbers", [])})


class Channels:
    """Char devices under `<root>/dev/nvidia-caps-imex-channels/`."""

    def __init__(self, directory: Path, *, emulated_files: bool = False) -> None:
        self.dir = directory
        self.emulated_files = emulated_files

    def check_mknod(self) -> None:
        """Fail early, naming the way out, when this host refuses char devices (containers)."""
        if self.emulated_files:
            return
        self.dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        probe = self.dir / ".mknod-probe"
        remove(probe)
        try:
            os.mknod(probe, stat.S_IFCHR | HOST_MODE, os.makedev(1, 3))
        except PermissionError as exc:
            raise ChannelError(
                f"mknod of a char device under {self.dir} is not permitted here ({exc}). "
                "Real trays always mknod; for the emulator only, pass --emulated-channel-files."
            ) from exc
        finally:
            remove(probe)

    def present(self) -> dict[int, tuple[int, int]]:
        """channel number → (major, minor) of every node now in the directory."""
        found: dict[int, tuple[int, int]] = {}
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return found
        for entry in entries:
            if not entry.name.startswith("channel") or not entry.name[7:].isdigit():
                continue
            found[int(entry.name[7:])] = self._device_of(Path(entry.path))
        return found

    def _device_of(self, path: Path) -> tuple[int, int]:
        st = path.lstat()
        if stat.S_ISCHR(st.st_mode):
            return os.major(st.st_rdev), os.minor(st.st_rdev)
        if self.emulated_files:
            major, _, minor = path.read_text().strip().partition(":")
            return int(major), int(minor)
        return -1, -1

    def ensure(self, numbers: list[int], major: int) -> list[int]:
        """Make exactly these channels exist with (major, N); returns the numbers present."""
        self.dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)  # noqa: S103 - the documented mode of this directory
        wanted = set(numbers)
        have = self.present()
        for number, device in have.items():
            if number not in wanted or device != (major, number):
                remove(self.dir / f"channel{number}")
        for number in sorted(wanted):
            if have.get(number) != (major, number):
                self._make(number, major)
        return sorted(wanted)

    def _make(self, number: int, major: int) -> None:
        path = self.dir / f"channel{number}"
        if self.emulated_files:
            write_atomic(path, f"{major}:{number}\n", mode=HOST_MODE)
            return
        os.mknod(path, stat.S_IFCHR | HOST_MODE, os.makedev(major, number))

    def remove_all(self) -> None:
        for number in self.present():
            remove(self.dir / f"channel{number}")


def cdi_spec(*, numbers: list[int], major: int, root: Path, domain_uid: str, mode: str) -> str:
    """A CDI spec: `nvidia.com/imex-channel=channel<N>` per channel; `=all` in All mode.

    `path` is where the container sees the node; `hostPath` where it is on this tray.
    """

    def node(n: int) -> dict[str, Any]:
        return {
            "path": f"/{CHANNELS_DIR}/channel{n}",
            "hostPath": str(root / CHANNELS_DIR / f"channel{n}"),
            "type": "c",
            "major": major,
            "minor": n,
            "fileMode": CONTAINER_MODE,
            "permissions": "rw",
        }

    if mode == "All":
        devices = [{"name": "all", "containerEdits": {"deviceNodes": [node(n) for n in numbers]}}]
    else:
        devices = [
            {"name": f"channel{n}", "containerEdits": {"deviceNodes": [node(n)]}} for n in numbers
        ]
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "annotations": {"portal.domains/domain-uid": domain_uid},
        "devices": devices,
    }
    return json.dumps(spec, indent=1) + "\n"


def write_cdi(path: Path, text: str) -> bool:
    return write_atomic(path, text)


def remove_cdi(path: Path) -> None:
    remove(path)
