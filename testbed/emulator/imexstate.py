# SPDX-License-Identifier: Apache-2.0
"""The emulated daemon's state: its config and fault knobs, its log, the daemon's state
machine, the nodes file and the connection cell of each peer, and the recovery quorum.

The nodes file lists one IP or host name per line (line number = index). Names are resolved
as glibc resolves them, through `/etc/hosts` of the daemon's own mount namespace (in a pod:
the pod's copy; IMEX_EMU_HOSTS names a stand-in where there is no namespace; the tray's own
host name resolves to its IP), at start and on SIGUSR1 only. A name that does not resolve is
a node that cannot be reached: its cell stays N (never connected), or keeps its R/D history;
each time, the log says it was looked up in DNS (where glibc goes next: the queries real
daemons flood cluster DNS with).

Connection cells: C connected; N never connected; R recovering — lost, clean up not yet
triggered; D disconnected — clean up triggered. A lost peer is R until the grace time passes
(`IMEX_NODE_DISCONNECTED_GRACE_TIME`; 0 at once, -1 never), then D.

Recovery quorum. The daemon keeps `var/run/nvidia-imex/persist.dat`: a key made from the
nodes file and a `Node #k: host` line per importer. Any peer it has been connected to counts
as an importer (a job across the domain imports from every member). A clean shutdown leaves
only the key. Changes are written within 50 ms, together (a burst of peers connecting or
leaving is one write), and always before the daemon answers a ctl call or crashes (fault
knob): a kill -9 within 50 ms of a change that nobody has looked at yet loses that change.
After an unclean exit, with `IMEX_WAIT_FOR_QUORUM=RECOVERY` (the default) and an unchanged
nodes file, the new instance waits in WAITING_FOR_RECOVERY until every former
importer has reconnected; `IMEX_WAIT_FOR_QUORUM=NONE` or a changed nodes file skips that.
Our assumption (NVIDIA documents no limit): the wait ends after
`IMEX_NODE_DISCONNECTED_GRACE_TIME` seconds, cleaning up for those that did not return,
and never ends when the grace time is -1.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
import zlib

from testbed.emulator.imexfiles import (
    Fatal,
    driver_version,
    hosts_file,
    imex_mgmt_problem,
    is_ip,
    read_hosts,
    read_json,
    read_json_text,
    read_nodes,
    read_text,
    tray_root,
    write_atomic,
)
from testbed.emulator.imexview import CELL_WORDS

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    from typing import IO

DEFAULT_VERSION = "580.82.07"
LEVELS = {1: "CRITICAL", 2: "ERROR", 3: "WARNING", 4: "INFO"}
PERSIST_BATCH_S = 0.05  # persist.dat changes are written together within this
VERBOSE_BUFFER = 2000  # lines kept for SIGHUP


class DaemonState:
    """What one daemon knows and keeps; the layers above add its sockets and its loop."""

    lock_fh: IO[str]
    hostname: str
    version: str
    ip: str
    port: int

    def __init__(self, config_path: str, cfg: dict[str, str]) -> None:
        self.config_path = config_path
        self.cfg = cfg
        self.root = tray_root(config_path)
        self.emu_dir = os.path.join(self.root, "run", "nvidia-emu")
        self.faults = read_json(os.path.join(self.emu_dir, "faults.json"))
        if os.environ.get("IMEX_EMU_FAULTS"):
            self.faults.update(read_json_text(os.environ["IMEX_EMU_FAULTS"], "IMEX_EMU_FAULTS"))
        self.log_fh = sys.stderr
        self.log_level = int(cfg.get("LOG_LEVEL") or 4)
        self.verbose: list[str] = []
        self.state = "INITIALIZING"
        self.started = time.monotonic()
        self.inst = os.urandom(6).hex()
        self.grace = float(cfg.get("IMEX_NODE_DISCONNECTED_GRACE_TIME") or -1)
        self.persist_dirty = False
        self.persist_due = 0.0  # when a pending persist.dat write is made (see dirty_persist)
        self.recovery_deadline: float | None = None
        self.recovering: set[int] = set()
        self.importers: set[int] = set()
        self.row = b""  # this node's row for `-N` answers, built when first asked
        self.apply_faults()

    # --- log ----------------------------------------------------------------------------
    def log(self, message: str, level: int = 4) -> None:
        now = time.time()
        stamp = time.strftime("%m/%d/%Y %H:%M:%S", time.localtime(now))
        line = f"[{stamp}.{int(now * 1000) % 1000:03d}] [{LEVELS[level]}] [tid {os.getpid()}] "
        line += message + "\n"
        if level <= self.log_level:
            self.log_fh.write(line)
            self.log_fh.flush()
        else:
            self.verbose.append(line)
            del self.verbose[:-VERBOSE_BUFFER]

    def dump_verbose(self) -> None:
        self.log_fh.write("".join(self.verbose))
        self.log_fh.flush()
        self.verbose.clear()

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.log(f"IMEX daemon state {self.state} -> {state}")
            self.state = state
            self.row = b""

    def set_cell(self, peer: int, cell: str) -> None:
        if self.cells.get(peer) != cell:
            self.log(f"connection to node {peer} ({self.entries[peer]}): {CELL_WORDS[cell]}")
            self.cells[peer] = cell
            self.row = b""

    def apply_faults(self) -> None:
        self.refuse = set(self.faults.get("refuse_peers") or ())
        self.cut = set(self.faults.get("cut_peers") or ())
        crash = float(self.faults.get("crash_after_s") or 0)
        self.crash_at = self.started + crash if crash else None

    # --- the tray's files -------------------------------------------------------------------
    def take_tray_lock(self) -> None:
        os.makedirs(self.emu_dir, exist_ok=True)
        self.lock_fh = open(os.path.join(self.emu_dir, "imex.lock"), "a+")  # noqa: SIM115
        try:
            fcntl.flock(self.lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise Fatal("another IMEX daemon is running on this node: NV_ERR_IN_USE")
        self.lock_fh.seek(0)
        self.lock_fh.truncate()
        self.lock_fh.write(f"running {os.getpid()}\n")
        self.lock_fh.flush()

    def mark_stopped(self) -> None:
        self.lock_fh.seek(0)
        self.lock_fh.truncate()
        self.lock_fh.write("stopped\n")
        self.lock_fh.flush()

    def count_start(self) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(os.path.join(self.emu_dir, "starts"), "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {stamp}\n")

    def identify(self) -> None:
        """This tray's host name, release, address and port; refuses a mismatched driver."""
        facts = read_json(os.path.join(self.emu_dir, "fabric.json"))
        self.hostname = facts.get("hostname") or os.uname().nodename
        installed = str(facts.get("driver_version") or DEFAULT_VERSION)
        self.version = str(
            self.faults.get("imex_version") or self.faults.get("version") or installed
        )
        self.log(f"IMEX version {self.version} starting, config {self.config_path}")
        self.check_driver()
        self.ip = self.cfg.get("BIND_INTERFACE_IP") or str(facts.get("ip") or "")
        if not self.ip:
            raise Fatal("BIND_INTERFACE_IP is empty and this node's IP is not known")
        self.port = int(self.cfg.get("SERVER_PORT") or 50000)

    def check_driver(self) -> None:
        if self.faults.get("stopped"):
            raise Fatal("held stopped by the demo's tray control (trayctl start-daemon ends it)")
        loaded = self.faults.get("version") or driver_version(self.root)
        path = os.path.join(self.root, "proc/driver/nvidia/version")
        if loaded is None:
            raise Fatal(f"no NVIDIA kernel driver loaded ({path} not found); cannot start")
        if loaded != self.version:
            raise Fatal(
                f"IMEX version {self.version} does not match the loaded NVIDIA driver "
                f"version {loaded} ({path}); aborting"
            )
        problem = imex_mgmt_problem(self.root)
        if problem:
            raise Fatal(problem)

    # --- the nodes file -----------------------------------------------------------------------
    def read_node_map(self) -> None:
        path = self.cfg.get("IMEX_NODE_CONFIG_FILE") or "/etc/nvidia-imex/nodes_config.cfg"
        try:
            self.entries = read_nodes(path)
        except OSError as exc:
            raise Fatal(f"cannot read the node config file {path}: {exc}")
        # The recovery key is the nodes file as written; the map this daemon shows its
        # peers includes a stale entry when the fault knob asks for one.
        self.persist_key = f"{zlib.crc32(chr(10).join(self.entries).encode()):08x}"
        if self.faults.get("stale_node_map"):
            self.entries.append(str(self.faults["stale_node_map"]))
        self.map_key = f"{zlib.crc32(chr(10).join(self.entries).encode()):08x}"
        self.addrs = self.resolve_all()
        self.index = -1
        for k, entry in enumerate(self.entries):
            if self.ip in (entry, self.addrs[k]) or entry.lower() == self.hostname.lower():
                self.index = k
                break
        if self.index < 0:
            raise Fatal(f"this node ({self.ip}) is not in the node config file {path}")
        self.peers = [k for k in range(len(self.entries)) if k != self.index]
        self.cells: dict[int, str] = dict.fromkeys(self.peers, "N")
        self.lost_until: dict[int, float] = {}
        self.peer_inst: dict[int, str] = {}

    def resolve_all(self) -> list[str | None]:
        """Each entry's address: an IP as is, a name through the daemon's hosts file."""
        hosts: dict[str, str] | None = None
        addrs: list[str | None] = []
        for entry in self.entries:
            if is_ip(entry):
                addrs.append(entry)
                continue
            if hosts is None:
                hosts = read_hosts(hosts_file(self.root))
            addr = hosts.get(entry.lower())
            if addr is None and entry.lower() == self.hostname.lower():
                addr = self.ip  # a host resolves its own name
            if addr is None:
                # glibc asks DNS next (`hosts: files dns`), in a pod once per search domain
                # under the default `ndots:5`; this emulator has no DNS, and says so.
                self.log(f"{entry}: not in {hosts_file(self.root)}: looked up in DNS", 3)
            addrs.append(addr)
        return addrs

    def mismatch(self, words: list[str]) -> str | None:
        """A peer's hello against ours: `!M!` for another nodes file, `!V!` another release."""
        if words[5] != self.map_key:
            return "!M!"
        if words[4] != self.version:
            return "!V!"
        return None

    # --- peers lost and cleaned up ------------------------------------------------------------
    def peer_lost(self, peer: int) -> None:
        """The connection to a peer's instance broke without a goodbye."""
        if self.grace == 0:
            self.clean_up(peer, "connection lost, grace time 0")
            return
        self.set_cell(peer, "R")
        if self.grace > 0:
            self.lost_until[peer] = time.monotonic() + self.grace

    def clean_up(self, peer: int, why: str) -> None:
        self.log(f"clean up triggered for node {peer} ({self.entries[peer]}): {why}", 3)
        self.lost_until.pop(peer, None)
        if peer in self.importers:
            self.importers.discard(peer)
            self.dirty_persist()
        self.set_cell(peer, "D")

    # --- recovery quorum ----------------------------------------------------------------------
    @property
    def persist_path(self) -> str:
        return os.path.join(self.root, "var/run/nvidia-imex/persist.dat")

    def decide_recovery(self) -> None:
        text = read_text(self.persist_path)
        lines = text.splitlines() if text else []
        if not lines:
            return
        if lines[0] != self.persist_key:
            self.log("the node config changed since the last run: persist.dat discarded")
            return
        importers = {int(line.split("#", 1)[1].split(":", 1)[0]) for line in lines[1:] if line}
        importers &= set(self.peers)
        if not importers:
            return
        if self.cfg.get("IMEX_WAIT_FOR_QUORUM", "RECOVERY").upper() == "NONE":
            self.log("unclean shutdown before; IMEX_WAIT_FOR_QUORUM=NONE: not waiting")
            return
        self.recovering = importers
        self.log(
            f"unclean shutdown before: waiting for {len(importers)} former importer(s) "
            f"to reconnect ({', '.join(f'#{k}' for k in sorted(importers))})",
            3,
        )
        if self.grace >= 0:
            self.recovery_deadline = time.monotonic() + self.grace
        self.set_state("WAITING_FOR_RECOVERY")

    def recovered(self, peer: int) -> None:
        if peer in self.recovering:
            self.recovering.discard(peer)
            self.dirty_persist()
            if not self.recovering:
                self.log("every former importer reconnected: recovery done")
                self.become_ready()

    def give_up_recovery(self) -> None:
        for peer in sorted(self.recovering):
            self.log(f"node {peer} did not return within the grace time: clean up triggered", 3)
        self.recovering.clear()
        self.dirty_persist()
        self.become_ready()

    def become_ready(self) -> None:
        self.recovery_deadline = None
        self.set_state("INIT_GPU")
        self.set_state("READY")
        self.dirty_persist()

    def dirty_persist(self) -> None:
        """persist.dat is to be written: within PERSIST_BATCH_S, so that a burst of peers
        connecting or saying goodbye is one write, not one per peer; and always before the
        daemon answers `nvidia-imex-ctl` or crashes, so whoever saw a state through the ctl
        finds it persisted."""
        if not self.persist_dirty:
            self.persist_dirty = True
            self.persist_due = time.monotonic() + PERSIST_BATCH_S

    def write_persist(self) -> None:
        self.persist_dirty = False
        lines = [self.persist_key]
        for k in sorted(self.importers | self.recovering):
            lines.append(f"Node #{k}: {self.entries[k]}")
        os.makedirs(os.path.dirname(self.persist_path), exist_ok=True)
        write_atomic(self.persist_path, "\n".join(lines) + "\n")
