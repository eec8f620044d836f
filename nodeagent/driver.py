# SPDX-License-Identifier: Apache-2.0
"""The NVIDIA driver's files as the agent finds them under the driver root.

NVIDIA's components on Kubernetes (its DRA driver's kubelet plugin, the GPU Operator's
operands) never assume the driver lives in their own image: they mount the *driver root*
(`/` for a host-installed driver, `/run/nvidia/driver` for the GPU Operator's driver
container) and take `libnvidia-ml.so.1`, `nvidia-imex` and `nvidia-imex-ctl` from there, so
the userspace always matches the kernel module. The agent does the same: the same search
directories as NVIDIA's container toolkit, under `--driver-root`.

The binaries run with the agent's own C library, as the toolkit's injected binaries do in
any container; only the driver's libraries are put in front of the loader, through a
directory of links to them (never the driver root's whole library directory, which also
holds that root's libc).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

NVML_LIBRARY = "libnvidia-ml.so.1"
# As the NVIDIA container toolkit looks for driver libraries and executables under a root.
LIBRARY_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib",
    "lib",
)
BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin", "usr/local/sbin")
DRIVER_LIBRARY_PREFIXES = ("libnvidia-", "libcuda.", "libnvcuvid.")


@dataclass(frozen=True)
class DriverRoot:
    path: Path

    @property
    def is_host_root(self) -> bool:
        """The driver is the one this process's own loader already sees."""
        return self.path.resolve() == Path("/")

    def find_library(self, name: str = NVML_LIBRARY) -> Path | None:
        for directory in LIBRARY_DIRS:
            candidate = self.path / directory / name
            if candidate.exists():
                return candidate
        return None

    def find_binary(self, name: str) -> Path | None:
        for directory in BINARY_DIRS:
            candidate = self.path / directory / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        return None

    def searched(self) -> str:
        return ", ".join(str(self.path / d) for d in LIBRARY_DIRS[:3]) + ", …"

    def command(self, name: str, given: list[str]) -> list[str]:
        """The argv prefix for `name`: as configured, else the driver root's, else PATH's."""
        if given:
            return given
        found = self.find_binary(name)
        return [str(found)] if found else [name]

    def environment(self, link_dir: Path) -> dict[str, str]:
        """The environment for the driver's binaries: its libraries first on the loader path.

        Nothing changes for a host-installed driver seen at `/`. Otherwise `link_dir` is
        filled with links to the driver's own libraries (those next to libnvidia-ml) and
        put first on LD_LIBRARY_PATH.
        """
        env = dict(os.environ)
        library = None if self.is_host_root else self.find_library()
        if library is None:
            return env
        link_driver_libraries(library.parent, link_dir)
        env["LD_LIBRARY_PATH"] = ":".join(
            p for p in (str(link_dir), env.get("LD_LIBRARY_PATH", "")) if p
        )
        return env


def link_driver_libraries(source: Path, link_dir: Path) -> None:
    """Mirror the driver's libraries of `source` as links in `link_dir` (idempotent)."""
    link_dir.mkdir(parents=True, exist_ok=True)
    wanted = {
        entry.name: Path(entry.path)
        for entry in os.scandir(source)
        if entry.name.startswith(DRIVER_LIBRARY_PREFIXES) and ".so" in entry.name
    }
    for entry in os.scandir(link_dir):
        if entry.name not in wanted:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    for name, target in wanted.items():
        link = link_dir / name
        with contextlib.suppress(OSError):  # absent, or not a link: replaced below
            if os.readlink(link) == str(target):
                continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
        os.symlink(target, link)


# --- the IMEX management capability -------------------------------------------------------
# nvidia-imex talks to the driver through a capability device, as NVIDIA's DRA driver sets it
# up for its compute-domain daemon: the kernel module advertises the capability's minor in
# /proc/driver/nvidia/capabilities/fabric-imex-mgmt (`DeviceFileMinor: 4323`,
# `DeviceFileMode: 256`, `DeviceFileModify: 1`), the char major is the `nvidia-caps` line of
# /proc/devices, and the node is /dev/nvidia-caps/nvidia-cap<minor>. The driver creates no
# node by default: whoever starts the daemon makes it.
IMEX_MGMT_CAPABILITY = Path("proc/driver/nvidia/capabilities/fabric-imex-mgmt")
CAPS_DEVICE_NAME = "nvidia-caps"
CAPS_DIR = Path("dev/nvidia-caps")


class CapabilityError(RuntimeError):
    """The IMEX management capability cannot be found or its device made; says why."""


@dataclass(frozen=True)
class Capability:
    major: int
    minor: int
    mode: int  # of the device node (DeviceFileMode)

    def node(self, root: Path) -> Path:
        return root / CAPS_DIR / f"nvidia-cap{self.minor}"


def char_major(proc_devices: Path, name: str) -> int | None:
    """The major of `name` among the character devices of /proc/devices, or None."""
    try:
        text = proc_devices.read_text(encoding="utf-8")
    except OSError:
        return None
    chars = text.split("Block devices:", 1)[0]
    for line in chars.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] == name and fields[0].isdigit():
            return int(fields[0])
    return None


def imex_mgmt(root: Path) -> Capability:
    """The fabric-imex-mgmt capability as the tray's /proc (under `root`) advertises it."""
    path = root / IMEX_MGMT_CAPABILITY
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CapabilityError(
            f"no IMEX management capability ({path}: {exc.strerror or exc}): nvidia-imex "
            "cannot run without it; load an NVIDIA kernel module with IMEX support"
        ) from None
    values = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines())}
    minor, mode = values.get("DeviceFileMinor", ""), values.get("DeviceFileMode", "")
    if not minor.isdigit() or not mode.isdigit():
        raise CapabilityError(f"{path} names no DeviceFileMinor and DeviceFileMode: {text[:200]!r}")
    major = char_major(root / "proc/devices", CAPS_DEVICE_NAME)
    if major is None:
        raise CapabilityError(
            f"no '{CAPS_DEVICE_NAME}' in the character devices of {root / 'proc/devices'}: "
            "the NVIDIA kernel module does not provide capability devices"
        )
    return Capability(major=major, minor=int(minor), mode=int(mode) & 0o777)


def ensure_imex_mgmt(root: Path, *, emulated_files: bool = False) -> Path:
    """Make /dev/nvidia-caps/nvidia-cap<minor> (under `root`) if it is missing or wrong;
    returns its path. `emulated_files`: a regular file saying `major:minor` (the emulator
    where mknod is refused), as the channels do."""
    cap = imex_mgmt(root)
    path = cap.node(root)
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if os.path.isfile(path) and emulated_files:
            if path.read_text().strip() == f"{cap.major}:{cap.minor}":
                return path
        elif stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(cap.major, cap.minor):
            return path
        path.unlink()
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if emulated_files:
            path.write_text(f"{cap.major}:{cap.minor}\n")
            os.chmod(path, cap.mode)
        else:
            os.mknod(path, stat.S_IFCHR | cap.mode, os.makedev(cap.major, cap.minor))
            os.chmod(path, cap.mode)  # mknod's mode is cut by the umask
    except OSError as exc:
        raise CapabilityError(f"cannot create the IMEX management device {path}: {exc}") from exc
    return path
