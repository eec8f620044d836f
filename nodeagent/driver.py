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
