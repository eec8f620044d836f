# SPDX-License-Identifier: Apache-2.0
"""The agent's configuration and the paths it owns under `--root`.

Paths and binaries are configuration so that the same code drives NVIDIA's binaries on a
real tray (root `/`) and the emulator in the demo and the tests (root `var/agents/<tray>`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from domain_portal import __version__

AGENT_VERSION = __version__  # shown by --version and sent in the join facts

CHANNELS_DIR = "dev/nvidia-caps-imex-channels"
CDI_SPEC = "etc/cdi/nvidia.com-imex-channel.json"
CDI_KIND = "nvidia.com/imex-channel"


@dataclass(frozen=True)
class Paths:
    """Every file the agent reads or writes on its tray, relative to one root."""

    root: Path

    @property
    def imex_config(self) -> Path:
        return self.root / "etc/nvidia-imex/config.cfg"

    @property
    def nodes_file(self) -> Path:
        return self.root / "etc/nvidia-imex/nodes_config.cfg"

    @property
    def proc_devices(self) -> Path:
        return self.root / "proc/devices"

    @property
    def channels_dir(self) -> Path:
        return self.root / CHANNELS_DIR

    @property
    def cdi_spec(self) -> Path:
        return self.root / CDI_SPEC

    @property
    def state_dir(self) -> Path:
        return self.root / "var/lib/nodeagent"

    @property
    def credentials(self) -> Path:
        """The node token, kept so that an agent restart does not re-register."""
        return self.state_dir / "node.json"

    @property
    def applied(self) -> Path:
        """What the agent last applied (domain, generation, channels), for re-adoption."""
        return self.state_dir / "applied.json"

    @property
    def pidfile(self) -> Path:
        return self.root / "run/nodeagent/nvidia-imex.pid"

    @property
    def daemon_log(self) -> Path:
        return self.root / "var/log/nvidia-imex.log"


@dataclass(frozen=True)
class AgentConfig:
    portal: str
    join_token: str
    root: Path = Path("/")
    imex_bin: list[str] = field(default_factory=lambda: ["nvidia-imex"])
    imex_ctl_bin: list[str] = field(default_factory=lambda: ["nvidia-imex-ctl"])
    hostname: str = ""
    ip: str = ""
    fabric_facts: Path | None = None  # emulator: NVML facts from a file instead of the driver
    poll_interval: float = 5.0  # fallback desired-state poll (the websocket nudges first)
    heartbeat_interval: float = 10.0
    ready_poll_interval: float = 1.0  # local health check once the domain is up
    start_poll_interval: float = 0.05  # `-q` polling while the daemon starts
    settle_s: float = 0.5  # report a passing step only once it has lasted this long
    stop_timeout: float = 5.0  # SIGTERM → SIGKILL
    ctl_timeout: float = 5.0
    emulated_channel_files: bool = False  # emulator only: regular files instead of mknod
    stop_daemon_on_exit: bool = False  # emulator/demo only; a real agent leaves it running
    websocket: bool = True

    @property
    def paths(self) -> Paths:
        return Paths(self.root)


def split_command(value: str) -> list[str]:
    """`--imex-bin "python -m nodeagent.emulator.imex"` → argv prefix."""
    argv = shlex.split(value)
    if not argv:
        raise ValueError("empty command")
    return argv
