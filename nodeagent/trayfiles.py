# SPDX-License-Identifier: Apache-2.0
"""What the agent writes on the tray for a domain, and its own record of what it applied.

The IMEX config and nodes file (or, for a domain that follows its workload, the stable
names and the members' hosts block), the channel device nodes and the CDI spec that hands
them to containers. They are checked when the desired state changes and once per poll
interval, repairing drift. The record (`applied.json`) lets a restarted agent re-adopt
what it had applied, and clean up what it had not.
"""

from __future__ import annotations

import json
from typing import Any

from agentwire.messages import ChannelSpec, DesiredDomain, Peer
from nodeagent.channels import Channels, cdi_spec, channel_numbers, remove_cdi
from nodeagent.config import AgentConfig
from nodeagent.facts import FactsKeeper
from nodeagent.files import read_json, remove, write_atomic
from nodeagent.imex.files import (
    MAX_NODES,
    names_unsupported,
    remove_config,
    render_config,
    render_names,
    render_nodes,
    write_config,
)
from nodeagent.imex.supervisor import rotate_log
from nodeagent.probe import channel_major
from nodeagent.supervision import DaemonKeeper
from nodeagent.traylog import TrayLog


class TrayFiles:
    def __init__(
        self, config: AgentConfig, keeper: DaemonKeeper, facts: FactsKeeper, log: TrayLog
    ) -> None:
        self.cfg = config
        self.paths = config.paths
        self.keeper = keeper
        self.facts = facts
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

    def check(self, want: DesiredDomain, now: float) -> str:
        """Apply `want` to the files when it changed or the poll interval is up (not on every
        fast readiness poll); returns what went wrong."""
        if want == self.want and now - self.checked_at < self.cfg.poll_interval:
            return ""
        self.present, error = self.apply(want)
        self.want, self.checked_at = (None if error else want), now
        return error

    def apply(self, want: DesiredDomain) -> tuple[list[int], str]:
        """IMEX config + nodes file, channel devices, CDI spec → (channels present, error)."""
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
        nodes, error = self.nodes(want, peers)
        if error:
            return [], error
        restart = write_config(paths=self.paths, config=config, nodes=nodes)
        if restart and self.keeper.daemon.running():
            # The daemon reads its config only at start: a new peer list needs a new instance.
            self.log.info("IMEX peers or addresses changed; restarting nvidia-imex")
            self.keeper.daemon.stop(self.cfg.stop_timeout)
        present, error = self.ensure_channels(want["channels"], want["uid"])
        if (
            self.applied.get("domain_uid") != want["uid"]
            or self.applied.get("generation") != want["generation"]
        ):
            self.save_applied(want)
        return present, error

    def nodes(self, want: DesiredDomain, peers: list[Peer]) -> tuple[str, str]:
        """The nodes file's text, or why there is none (→ (text, error))."""
        if not want.get("slots"):
            return render_nodes([p["ip"] for p in peers]), ""
        # Follows its workload: stable names; a new peer list is a hosts change and a
        # SIGUSR1, never a restart of this daemon.
        unsupported = names_unsupported(self.facts.facts.driver_version if self.facts.facts else "")
        if unsupported:
            return "", unsupported
        if want["index"] >= MAX_NODES:
            return "", (
                f"this tray is member {want['index']} of a domain that follows its "
                f"workload, whose nodes file lists {MAX_NODES} names (0 to "
                f"{MAX_NODES - 1})"
            )
        mapping = {p["index"]: p["ip"] for p in peers}
        self.keeper.follow_peers(mapping, settling=bool(want.get("settling")))
        return render_names(), ""

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

    def dirty(self) -> bool:
        return bool(
            self.keeper.daemon.running()
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
