# SPDX-License-Identifier: Apache-2.0
"""What the emulated `nvidia-imex` reads from its tray: config, nodes file, hosts file,
driver version, JSON facts and fault knobs; and the atomic write it uses for persist.dat.

Stdlib's lean modules only (the daemon's start cost is mostly imports): JSON is read with
the C scanner of `_json` rather than the `json` package, which pulls in `re`.
"""

from __future__ import annotations

import _socket
import os
from _json import make_scanner

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    from typing import Any


class Fatal(Exception):
    """The daemon cannot start; the message says why."""


def read_config(path: str) -> dict[str, str]:
    """`KEY=VALUE` lines; `#` starts a comment; later keys win, like the real parser."""
    values: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.split("#", 1)[0].strip()
            if "=" in line:
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
    return values


def read_nodes(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh if line.strip() and not line.startswith("#")]


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


class _JsonContext:
    """What `_json.make_scanner` reads off `json.JSONDecoder`: the C scanner without the
    `json` package, whose import (it pulls in `re`) cost more than the rest of a start."""

    strict = True
    object_hook = object_pairs_hook = parse_constant = None
    parse_float, parse_int = float, int
    memo: dict[str, str] = {}


_scan = make_scanner(_JsonContext())  # type: ignore[arg-type]  # its stub wants a decoder


def read_json(path: str) -> dict[str, Any]:
    return read_json_text(read_text(path) or "", path)


def read_json_text(text: str, where: str) -> dict[str, Any]:
    text = text.strip()
    if not text:
        return {}
    try:
        doc, _ = _scan(text, 0)
    except (StopIteration, ValueError) as exc:
        raise Fatal(f"{where} is not valid JSON ({exc!r})")
    return doc if isinstance(doc, dict) else {}


def hosts_file(root: str) -> str:
    """The hosts file the daemon resolves names through, as glibc does: `/etc/hosts` of its
    own mount namespace (in a pod, the kubelet's bind mount of the pod's copy).
    IMEX_EMU_HOSTS names another where no namespace stands in for the pod (the demo, tests
    that run the daemon as a plain child): absolute, or relative to the tray's root."""
    named = os.environ.get("IMEX_EMU_HOSTS", "")
    return os.path.join(root, named) if named else "/etc/hosts"


def read_hosts(path: str) -> dict[str, str]:
    """`/etc/hosts` format: `IP name [alias ...]`; the first line naming a host wins."""
    names: dict[str, str] = {}
    for raw in (read_text(path) or "").splitlines():
        fields = raw.split("#", 1)[0].split()
        for name in fields[1:]:
            names.setdefault(name.lower(), fields[0])
    return names


def is_ip(text: str) -> bool:
    try:
        _socket.inet_pton(_socket.AF_INET, text)
    except OSError:
        return False
    return True


def driver_version(root: str) -> str | None:
    """The version in `<root>/proc/driver/nvidia/version`, as the real file words it:
    `NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.82.07  Release Build ...`"""
    text = read_text(os.path.join(root, "proc/driver/nvidia/version"))
    if not text:
        return None
    for word in text.split("\n", 1)[0].split():
        if word[:1].isdigit() and "." in word:
            return word
    return None


def imex_mgmt_problem(root: str) -> str:
    """Why the daemon cannot open the driver's IMEX management device, or "": the minor of
    `proc/driver/nvidia/capabilities/fabric-imex-mgmt`, the `nvidia-caps` major of
    `proc/devices`, and `dev/nvidia-caps/nvidia-cap<minor>` a char device with both (or the
    emulator's stand-in file `major:minor` where mknod is refused)."""
    cap = os.path.join(root, "proc/driver/nvidia/capabilities/fabric-imex-mgmt")
    fields = dict(line.partition(":")[::2] for line in (read_text(cap) or "").splitlines())
    minor = fields.get("DeviceFileMinor", "").strip()
    if not minor.isdigit():
        return f"failed to query the IMEX management capability ({cap}); cannot start"
    major = -1
    for line in (read_text(os.path.join(root, "proc/devices")) or "").splitlines():
        words = line.split()
        if len(words) == 2 and words[1] == "nvidia-caps" and words[0].isdigit():
            major = int(words[0])
    node = os.path.join(root, f"dev/nvidia-caps/nvidia-cap{minor}")
    try:
        st = os.lstat(node)
    except OSError as exc:
        return f"failed to open the IMEX management device {node}: {exc.strerror}; cannot start"
    if (st.st_mode & 0o170000) == 0o020000:  # a char device
        found = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    else:
        found = (read_text(node) or "").strip()
    if found != f"{major}:{minor}":
        return f"{node} is {found or 'not a device'}, not nvidia-caps {major}:{minor}; cannot start"
    return ""


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def tray_root(config_path: str) -> str:
    """The emulated tray's root: IMEX_EMU_ROOT, or the root above the config's directory
    (the agent's own `var/lib/domain-portal/imex/`, or the package's `etc/nvidia-imex/`)."""
    if os.environ.get("IMEX_EMU_ROOT"):
        return os.environ["IMEX_EMU_ROOT"]
    cfg_dir = os.path.dirname(os.path.abspath(config_path))
    for tail in ("var/lib/domain-portal/imex", "etc/nvidia-imex"):
        if cfg_dir.endswith(os.sep + tail):
            return cfg_dir[: -len(tail) - 1]
    return cfg_dir
