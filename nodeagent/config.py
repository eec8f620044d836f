# SPDX-License-Identifier: Apache-2.0
"""The agent's configuration and the paths it owns under `--root`.

Paths and binaries are configuration so that the same code drives NVIDIA's binaries on a
real tray (root `/`) and the emulator in the demo and the tests (root `var/agents/<tray>`).

Everything the agent writes for itself lives in its own directory, `/var/lib/domain-portal`:
the IMEX config and nodes file it hands its daemon, its node token, what it last applied,
and the files it shares with the IMEX runner. The host's `/etc/nvidia-imex` belongs to
NVIDIA's package and its `nvidia-imex.service`; the agent never writes or deletes there.
The only host paths it writes outside its directory are the ones the workloads read: the
channel device nodes under `/dev/nvidia-caps-imex-channels` and the CDI spec in `/etc/cdi`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from domain_portal import __version__

AGENT_VERSION = __version__  # shown by --version and sent in the join facts
STATE_DIR = "var/lib/domain-portal"
CHANNELS_DIR = "dev/nvidia-caps-imex-channels"
# The tray's static CDI spec, in our own vendor's name (the DRA driver's; the per-claim specs
# are `<vendor>/claim`): NVIDIA's `nvidia.com` kinds are NVIDIA's to define.
CDI_KIND = "imex-channel.portal.domains/channel"
CDI_SPEC = "etc/cdi/imex-channel.portal.domains-channel.json"
# Where agents before the rename wrote it (as `nvidia.com/imex-channel`): removed on sight.
LEGACY_CDI_SPEC = "etc/cdi/nvidia.com-imex-channel.json"
# NVIDIA's defaults (the config template of its DRA driver's IMEX daemon, and the IMEX
# documentation): wait forever for a disconnected peer before cleaning up what it shared,
# and log at INFO (4).
IMEX_GRACE_TIME_S = -1
IMEX_LOG_LEVEL = 4
# Channel device nodes as NVIDIA's DRA driver gives them to containers: mode 0666, root's.
CHANNEL_MODE = 0o666


@dataclass(frozen=True)
class Paths:
    """Every file the agent reads or writes on its tray, relative to one root."""

    root: Path

    @property
    def state_dir(self) -> Path:
        """The agent's own directory on the host."""
        return self.root / STATE_DIR

    @property
    def imex_dir(self) -> Path:
        return self.state_dir / "imex"

    @property
    def imex_config(self) -> Path:
        return self.imex_dir / "config.cfg"

    @property
    def nodes_file(self) -> Path:
        return self.imex_dir / "nodes_config.cfg"

    @property
    def pidfile(self) -> Path:
        """The daemon the agent started itself (no runner), for re-adoption."""
        return self.imex_dir / "nvidia-imex.pid"

    @property
    def runner_dir(self) -> Path:
        """Shared with the IMEX runner: the agent's request, the runner's status."""
        return self.state_dir / "runner"

    @property
    def credentials(self) -> Path:
        """The node token, kept so that an agent restart does not re-register."""
        return self.state_dir / "agent/node.json"

    @property
    def applied(self) -> Path:
        """What the agent last applied (domain, generation, channels), for re-adoption."""
        return self.state_dir / "agent/applied.json"

    @property
    def desired(self) -> Path:
        """The last desired state fetched: until a restarted agent fetches one, its tray's
        ResourceSlice says what this one said (never free while it serves a domain)."""
        return self.state_dir / "agent/desired.json"

    @property
    def driver_libs(self) -> Path:
        """Links to the driver root's own libraries, for the IMEX binaries' loader."""
        return self.state_dir / "driver-libs"

    @property
    def daemon_log(self) -> Path:
        return self.root / "var/log/domain-portal/nvidia-imex.log"

    @property
    def proc(self) -> Path:
        return self.root / "proc"

    @property
    def proc_devices(self) -> Path:
        return self.root / "proc/devices"

    @property
    def boot_id(self) -> Path:
        """A new random id at every boot: what was prepared before it is gone from tmpfs."""
        return self.root / "proc/sys/kernel/random/boot_id"

    @property
    def channels_dir(self) -> Path:
        return self.root / CHANNELS_DIR

    @property
    def cdi_spec(self) -> Path:
        return self.root / CDI_SPEC

    @property
    def hosts(self) -> Path:
        """Where the daemon resolves the stable peer names of a domain that follows its
        workload (the agent keeps one marked block in it)."""
        return self.root / "etc/hosts"

    @property
    def cdi_run_dir(self) -> Path:
        """Per-claim CDI specs of the DRA plugin (the runtime reads /var/run/cdi too)."""
        return self.root / "var/run/cdi"

    @property
    def systemd_dirs(self) -> tuple[Path, ...]:
        """Where an enabled unit's `*.wants/` symlinks live (persistent, then runtime)."""
        return (self.root / "etc/systemd/system", self.root / "run/systemd/system")


@dataclass(frozen=True)
class AgentConfig:
    portal: str
    join_token: str
    # Kubernetes: the projected service-account token file (audience: the portal's) the
    # agent joins with instead of the join token. Read afresh at every join: the kubelet
    # rotates it.
    service_account_token_file: Path | None = None
    root: Path = Path("/")
    # Where the NVIDIA driver's files are: "/" on a host-installed driver, the GPU
    # Operator's driver container root (e.g. /run/nvidia/driver) as mounted into the
    # agent's container otherwise. libnvidia-ml.so.1 and nvidia-imex(-ctl) come from here.
    driver_root: Path = Path("/")
    imex_bin: list[str] = field(default_factory=list)  # empty: nvidia-imex of the driver root
    imex_ctl_bin: list[str] = field(default_factory=list)
    imex_runner: bool = False  # the daemon is run by `nodeagent.runner`, not by the agent
    imex_grace_time: int = IMEX_GRACE_TIME_S  # IMEX_NODE_DISCONNECTED_GRACE_TIME
    imex_log_level: int = IMEX_LOG_LEVEL  # LOG_LEVEL, 0 (off) … 4 (info)
    hostname: str = ""
    ip: str = ""
    fabric_facts: Path | None = None  # emulator: NVML facts from a file instead of the driver
    channel_mode: int = CHANNEL_MODE  # of the channel device nodes on the host and in CDI
    channel_gid: int | None = None  # their group (None: root's)
    poll_interval: float = 5.0  # fallback desired-state poll (the websocket nudges first)
    heartbeat_interval: float = 10.0
    gpu_health_interval: float = 60.0  # one report a minute carries the GPUs' health; 0: off
    ready_poll_interval: float = 2.0  # local health check once the domain is up, …
    ready_poll_max: float = 5.0  # … doubling to this while it stays up
    start_poll_interval: float = 0.05  # `-q` polling while the daemon starts
    settle_s: float = 0.5  # report a passing step only once it has lasted this long
    stop_timeout: float = 5.0  # SIGTERM → SIGKILL
    ctl_timeout: float = 5.0
    fabric_retry_s: float = 1.0  # first re-probe of an unfinished fabric registration
    fabric_retry_max_s: float = 60.0  # the backoff's ceiling
    emulated_channel_files: bool = False  # emulator only: regular files instead of mknod
    stop_daemon_on_exit: bool = False  # emulator/demo only; a real agent leaves it running
    websocket: bool = True
    # The DRA kubelet plugin (Kubernetes): on when the kubelet's directory is given.
    kubelet_dir: Path | None = None  # /var/lib/kubelet (plugins_registry/, plugins/)
    kubeconfig: Path | None = None  # None: $KUBECONFIG, else the pod's service account
    prepare_wait_s: float = 40.0  # a prepare keeps trying this long, then says "not yet"

    @property
    def paths(self) -> Paths:
        return Paths(self.root)


def split_command(value: str) -> list[str]:
    """`--imex-bin "python -m testbed.emulator.imex"` → argv prefix; "" → []."""
    return shlex.split(value)
