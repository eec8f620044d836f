# SPDX-License-Identifier: Apache-2.0
"""The host's own IMEX service, which must not run beside the agent's daemon.

NVIDIA's driver packages ship `nvidia-imex.service`. One daemon runs per tray: a second one
fails with NV_ERR_IN_USE (reference: IMEX-FACTS), so a tray whose host service is enabled
(it starts at the next boot) or running (it holds the tray now) cannot serve a portal
domain. The agent looks without asking systemd (no D-Bus, no `nsenter` into the host):

- enabled: a `nvidia-imex.service` link in some `*.wants/` or `*.requires/` directory of
  `/etc/systemd/system` or `/run/systemd/system`, unless the unit is masked;
- running: a process whose name is `nvidia-imex` and whose command line does not name the
  agent's own config file (the Helm chart runs the agent with the host's PID namespace).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentwire.messages import Condition, ConditionType
from nodeagent.config import Paths

UNIT = "nvidia-imex.service"
DAEMON_NAME = "nvidia-imex"


def enabled_links(paths: Paths) -> list[Path]:
    """The links that enable the host's unit (none when it is masked)."""
    found: list[Path] = []
    for directory in paths.systemd_dirs:
        unit = directory / UNIT
        if unit.is_symlink() and os.readlink(unit) == "/dev/null":
            return []  # masked: it cannot start, whatever wants it
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.name.endswith((".wants", ".requires")) and entry.is_dir():
                link = Path(entry.path) / UNIT
                if link.is_symlink() or link.exists():
                    found.append(link)
    return sorted(found)


@dataclass(frozen=True)
class Process:
    pid: int
    start: int  # clock ticks after boot (/proc/<pid>/stat field 22)
    args: list[str]  # the command line, one word each

    @property
    def cmdline(self) -> str:
        return " ".join(self.args).strip()


def live_processes(proc: Path, *, name: str = "") -> Iterator[Process]:
    """Every process under `proc` (a /proc) that is not a zombie (one that exited, not yet
    reaped, holds nothing); with `name`, only those whose `comm` is that (read first: cheap)."""
    try:
        entries = list(os.scandir(proc))
    except FileNotFoundError:
        return
    for entry in entries:
        if not entry.name.isdigit():
            continue
        where = Path(entry.path)
        try:
            if name and (where / "comm").read_text().strip() != name:
                continue
            stat = (where / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] == "Z":
                continue
            start = int(stat[19])
            raw = (where / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not a process directory
        args = [a.decode(errors="replace") for a in raw.split(b"\0")]
        if args and args[-1] == "":
            args.pop()
        yield Process(int(entry.name), start, args)


def foreign_daemons(paths: Paths) -> list[tuple[int, str]]:
    """(pid, command line) of every running `nvidia-imex` that is not the agent's."""
    ours = str(paths.imex_config)
    return sorted(
        (p.pid, p.cmdline)
        for p in live_processes(paths.proc, name=DAEMON_NAME)
        if ours not in p.cmdline
    )


def host_service_condition(paths: Paths) -> Condition | None:
    """A blocking condition naming what was found and what to do, or None."""
    running = foreign_daemons(paths)
    enabled = enabled_links(paths)
    if not running and not enabled:
        return None
    parts = []
    if running:
        shown = "; ".join(f"pid {pid}: {cmd or DAEMON_NAME}" for pid, cmd in running[:3])
        parts.append(f"an nvidia-imex this agent did not start is running ({shown})")
    if enabled:
        parts.append(f"the host's {UNIT} is enabled ({enabled[0]})")
    return {
        "type": ConditionType.HOST_IMEX_SERVICE,
        "blocking": True,
        "message": (
            f"{'; '.join(parts)[:1500]}. Only one IMEX daemon runs per tray and the agent "
            f"owns it: run `systemctl disable --now {UNIT}` on the tray."
        ),
    }
