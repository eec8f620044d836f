# SPDX-License-Identifier: Apache-2.0
"""IMEX channel device nodes and the CDI spec that hands them to containers.

`/dev/nvidia-caps-imex-channels/channel<N>` is a char device with the tray's dynamic
`nvidia-caps-imex-channels` major (from /proc/devices, never hard-coded) and minor N. The
driver creates none by default; they vanish on reboot. Creating them is idempotent, and any
node the current domain does not own is removed (stale ones are wiped at agent start).

Who may open them: NVIDIA's DRA driver hands containers the node with mode 0666, and the
agent does the same on the host by default, so a bare-metal job that does not run as root
can use its channel. Operators who want less give a mode and a group (`--channel-mode 0660
--channel-group imex`); the CDI spec then says the same (`fileMode`, `gid`), so a container
gets what a process on the host gets.

Channel sets travel compactly: `{"mode": "Single", "numbers": [7]}` or, for `All`,
`{"mode": "All", "first": 0, "last": 2047}` (every channel, 0 included, as NVIDIA's driver
gives them: the tray serves one domain at a time).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from agentwire.messages import ChannelSpec
from nodeagent.config import CDI_KIND, CHANNEL_MODE, CHANNELS_DIR, LEGACY_CDI_SPEC
from nodeagent.files import remove, write_atomic

PROBE_MODE = 0o600


class ChannelError(RuntimeError):
    pass


def channel_numbers(spec: ChannelSpec | None) -> list[int]:
    """The channel numbers a desired-state channel spec names."""
    if not spec:
        return []
    if spec["mode"] == "All":
        return list(range(int(spec.get("first", 0)), int(spec.get("last", -1)) + 1))
    return sorted({int(n) for n in spec.get("numbers", [])})


class Channels:
    """Char devices under `<root>/dev/nvidia-caps-imex-channels/`."""

    def __init__(
        self,
        directory: Path,
        *,
        mode: int = CHANNEL_MODE,
        gid: int | None = None,
        emulated_files: bool = False,
    ) -> None:
        self.dir = directory
        self.mode = mode
        self.gid = gid
        self.emulated_files = emulated_files

    def check_mknod(self) -> None:
        """Fail early, naming the way out, when this host refuses char devices (containers)."""
        if self.emulated_files:
            return
        self.dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        probe = self.dir / ".mknod-probe"
        remove(probe)
        try:
            os.mknod(probe, stat.S_IFCHR | PROBE_MODE, os.makedev(1, 3))
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
            self._own(self.dir / f"channel{number}")
        return sorted(wanted)

    def _make(self, number: int, major: int) -> None:
        path = self.dir / f"channel{number}"
        if self.emulated_files:
            # a stand-in for a device node, which a reboot removes: nothing to make durable
            write_atomic(path, f"{major}:{number}\n", mode=self.mode, durable=False)
            return
        os.mknod(path, stat.S_IFCHR | self.mode, os.makedev(major, number))

    def _own(self, path: Path) -> None:
        """Mode and group exactly as configured (mknod's mode is cut by the umask)."""
        st = path.lstat()
        if stat.S_IMODE(st.st_mode) != self.mode:
            os.chmod(path, self.mode)
        if self.gid is not None and st.st_gid != self.gid:
            os.chown(path, -1, self.gid)

    def remove_all(self) -> None:
        for number in self.present():
            remove(self.dir / f"channel{number}")


def cdi_device_node(
    n: int,
    *,
    major: int,
    host_path: Path | None = None,
    file_mode: int = CHANNEL_MODE,
    gid: int | None = None,
) -> dict[str, Any]:
    """The CDI `deviceNodes` entry of channel `n`: `path` where the container sees it,
    `hostPath` the node on this tray that backs it (none: the runtime makes it inside the
    container from type, major and minor), `permissions` the device cgroup access (read,
    write; no mknod), `fileMode` and `gid` the node's mode and group in the container."""
    entry: dict[str, Any] = {"path": f"/{CHANNELS_DIR}/channel{n}"}
    if host_path is not None:
        entry["hostPath"] = str(host_path)
    entry.update(type="c", major=major, minor=n, permissions="rw", fileMode=file_mode)
    if gid is not None:
        entry["gid"] = gid
    return entry


def cdi_version(spec: dict[str, Any]) -> str:
    """The oldest `cdiVersion` whose rules accept `spec`, by CDI's own rules
    (container-device-interface, specs-go/version.go, `MinimumRequiredVersion`), so that
    every runtime that can read it takes it and none refuses it as too old:

    - 0.6.0: annotations on the spec or a device, or a dot in the kind's class;
    - 0.5.0: a device name that does not start with a letter (a claim uid may start with a
      digit), or a device node with `hostPath`;
    - 0.4.0: a mount with a `type`;
    - 0.3.0 otherwise (the oldest a runtime still reads).
    """
    devices = spec.get("devices", [])
    edits = [spec.get("containerEdits") or {}, *(d.get("containerEdits") or {} for d in devices)]
    _, _, cls = str(spec.get("kind", "")).partition("/")
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in cls:
        return "0.6.0"
    if any(not str(d.get("name", "a"))[:1].isalpha() for d in devices) or any(
        "hostPath" in node for e in edits for node in e.get("deviceNodes", [])
    ):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


def cdi_document(
    kind: str, devices: list[dict[str, Any]], *, annotations: dict[str, str] | None = None
) -> str:
    """A CDI spec file's text: `kind`, `devices` and `annotations`, with the `cdiVersion`
    those need (`cdi_version`)."""
    spec: dict[str, Any] = {"kind": kind}
    if annotations:
        spec["annotations"] = annotations
    spec["devices"] = devices
    return json.dumps({"cdiVersion": cdi_version(spec), **spec}, indent=1) + "\n"


def cdi_spec(
    *,
    numbers: list[int],
    major: int,
    root: Path,
    domain_uid: str,
    mode: str,
    file_mode: int = CHANNEL_MODE,
    gid: int | None = None,
) -> str:
    """The tray's CDI spec: `imex-channel.portal.domains/channel=channel<N>` per channel;
    `=all` in All mode; each backed by the agent's node on the tray, made the same in the
    container as on the host."""

    def node(n: int) -> dict[str, Any]:
        host = root / CHANNELS_DIR / f"channel{n}"
        return cdi_device_node(n, major=major, host_path=host, file_mode=file_mode, gid=gid)

    if mode == "All":
        devices = [{"name": "all", "containerEdits": {"deviceNodes": [node(n) for n in numbers]}}]
    else:
        devices = [
            {"name": f"channel{n}", "containerEdits": {"deviceNodes": [node(n)]}} for n in numbers
        ]
    return cdi_document(CDI_KIND, devices, annotations={"portal.domains/domain-uid": domain_uid})


def remove_cdi(path: Path) -> None:
    """The tray's static spec, and the one an agent before the kind's rename wrote."""
    remove(path)
    remove(path.parent / Path(LEGACY_CDI_SPEC).name)
