# SPDX-License-Identifier: Apache-2.0
"""What the agent writes on the tray for a domain, and its own record of what it applied.

The IMEX config and nodes file (or, for a domain that follows its workload, the stable
names), the channel device nodes and the CDI spec that hands them to containers. They are
checked when the desired state changes and once per poll interval, repairing drift. The
record (`applied.json`) lets a restarted agent re-adopt what it had applied, and clean up
what it had not.

Files only: what a change asks of the daemon (a restart for a new config, the members'
names for its hosts file) is returned (`FilesChecked`), and the agent's loop tells the
daemon's keeper.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentwire.messages import ChannelSpec, DesiredDomain, Peer
from nodeagent.channels import Channels, cdi_spec, channel_numbers, remove_cdi
from nodeagent.config import AgentConfig
from nodeagent.files import read_json, remove, write_atomic
from nodeagent.imex.files import (
    MAX_NODES,
    names_unsupported,
    peer_hosts,
    remove_config,
    render_config,
    render_names,
    render_nodes,
    write_config,
)
from nodeagent.imex.supervisor import rotate_log
from nodeagent.probe import channel_major
from nodeagent.traylog import TrayLog


@dataclass(frozen=True)
class FilesChecked:
    """What applying a desired state to the files found, and asks of the daemon."""

    present: list[int] = field(default_factory=list)  # the channels found or made
    error: str = ""  # what went wrong ("": nothing)
    # The config or nodes file changed in what a running daemon reads only at its start:
    # it must be restarted to follow them.
    restart: bool = False
    # A domain that follows its workload: its names and the members' addresses now (name →
    # IP, every name of the nodes file), for the hosts file the daemon resolves them
    # through; None for a domain of fixed trays.
    hosts: Mapping[str, str] | None = None
    settling: bool = False  # the portal says the members are still changing


class TrayFiles:
    def __init__(self, config: AgentConfig, log: TrayLog) -> None:
        self.cfg = config
        self.paths = config.paths
        self.log = log
        self.channels = Channels(
            self.paths.channels_dir,
            mode=config.channel_mode,
            gid=config.channel_gid,
            emulated_files=config.emulated_channel_files,
        )
        self.applied: dict[str, Any] = read_json(self.paths.applied) or {}
        self.want: DesiredDomain | None = None  # applied to the files, unchanged since
        self.checked_at = 0.0
        self.present: list[int] = []  # the channels found or made at the last check
        self.major: int | None = None  # the channel devices' major at the last check

    def check(self, want: DesiredDomain, now: float, *, driver_version: str) -> FilesChecked | None:
        """Apply `want` to the files when it changed or the poll interval is up (not on every
        fast readiness poll); None when they were not looked at."""
        if want == self.want and now - self.checked_at < self.cfg.poll_interval:
            return None
        checked = self.apply(want, driver_version=driver_version)
        self.present = checked.present
        self.want, self.checked_at = (None if checked.error else want), now
        return checked

    def apply(self, want: DesiredDomain, *, driver_version: str) -> FilesChecked:
        """IMEX config + nodes file, channel devices, CDI spec."""
        peers = sorted(want["peers"], key=lambda p: p["index"])
        own = next((p["ip"] for p in peers if p["index"] == want["index"]), "")
        config = render_config(
            paths=self.paths,
            bind_ip=own,
            server_port=want["imex"]["server_port"],
            cmd_port=want["imex"]["cmd_port"],
            grace_time=self.cfg.imex_grace_time,
            log_level=self.cfg.imex_log_level,
        )
        nodes, error = self.nodes(want, peers, driver_version)
        if error:
            return FilesChecked(error=error)
        # The daemon reads its config only at start: a new peer list needs a new instance.
        restart = write_config(paths=self.paths, config=config, nodes=nodes)
        present, error = self.ensure_channels(want["channels"], want["uid"])
        if (
            self.applied.get("domain_uid") != want["uid"]
            or self.applied.get("generation") != want["generation"]
        ):
            self.save_applied(want)
        # Follows its workload: a new peer list is a hosts change and a SIGUSR1, never a
        # restart of this daemon.
        hosts = None
        if want.get("slots"):
            members = {p["index"]: p["ip"] for p in peers}
            hosts = peer_hosts(members, want.get("names", ""))
        return FilesChecked(present, error, restart, hosts, bool(want.get("settling")))

    def nodes(self, want: DesiredDomain, peers: list[Peer], driver_version: str) -> tuple[str, str]:
        """The nodes file's text, or why there is none (→ (text, error))."""
        if not want.get("slots"):
            return render_nodes([p["ip"] for p in peers]), ""
        unsupported = names_unsupported(driver_version)
        if unsupported:
            return "", unsupported
        if want["index"] >= MAX_NODES:
            return "", (
                f"this tray is member {want['index']} of a domain that follows its "
                f"workload, whose nodes file lists {MAX_NODES} names (0 to "
                f"{MAX_NODES - 1})"
            )
        return render_names(want.get("names", "")), ""

    def ensure_channels(self, spec: ChannelSpec, uid: str) -> tuple[list[int], str]:
        major = self.major = channel_major(self.paths.proc_devices)
        if major is None:
            return [], f"no nvidia-caps-imex-channels line in {self.paths.proc_devices}"
        numbers = channel_numbers(spec)
        present = self.channels.ensure(numbers, major)
        text = cdi_spec(
            numbers=numbers,
            major=major,
            root=self.paths.root,
            domain_uid=uid,
            mode=spec["mode"],
            file_mode=self.cfg.channel_mode,
            gid=self.cfg.channel_gid,
        )
        write_atomic(self.paths.cdi_spec, text, durable=False)
        return present, ""

    # --- the record, and cleaning up --------------------------------------------------------
    def save_applied(self, want: DesiredDomain) -> None:
        self.applied = {
            "domain_uid": want["uid"],
            "generation": want["generation"],
            "request_id": want["request_id"],
            "channels": want["channels"],
        }
        # No fsync: after a power loss nothing applied survives (the daemon, the /dev nodes),
        # and a torn record reads as none, which makes the agent clean up what is left.
        write_atomic(self.paths.applied, _json(self.applied), durable=False)

    def forget(self) -> None:
        """The portal has heard that the domain is gone from the tray: its record goes, and
        its daemon's log is put aside (the next domain's errors quote only its own)."""
        self.applied = {}
        remove(self.paths.applied)
        rotate_log(self.paths.daemon_log)

    def wipe_stale(self) -> None:
        """At start: the channel devices (and CDI spec) of no domain the record names."""
        keep = set(channel_numbers(self.applied.get("channels"))) if self.applied else set()
        stale = [n for n in self.channels.present() if n not in keep]
        for number in stale:
            remove(self.paths.channels_dir / f"channel{number}")
        if stale:
            self.log.info("wiped %d stale channel device(s) at start", len(stale))
        if not self.applied.get("domain_uid"):
            remove_cdi(self.paths.cdi_spec)

    def dirty(self, *, daemon_running: bool) -> bool:
        return bool(
            daemon_running
            or self.paths.imex_config.exists()
            or self.paths.nodes_file.exists()
            or self.paths.cdi_spec.exists()
            or self.channels.present()
        )

    def remove_all(self) -> None:
        """The channel devices, the CDI spec, the IMEX config and nodes file."""
        self.want = None
        self.channels.remove_all()
        remove_cdi(self.paths.cdi_spec)
        remove_config(self.paths)


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
