# SPDX-License-Identifier: Apache-2.0
"""Emulated `nvidia-imex`: one per tray, really talking to its peers over TCP.

Usage: `nvidia-imex -c <config>` (`bin/nvidia-imex` runs `imex.py`, which runs this). It
behaves as NVIDIA documents its daemon (reference/IMEX-FACTS.md and the IMEX guide), the
unkind parts included, and costs what a native daemon costs: lean stdlib modules only (no
`socket`, `json`, `signal` or `selectors` wrappers: their imports were most of a start), one
epoll loop, no timers while nothing happens, and status gathered only when someone asks.

Start. The config is read once (`KEY=VALUE`, `#` comments). Only one daemon per tray: a
second exits with NV_ERR_IN_USE. The daemon refuses to start (exit 1, message on stderr and
in its log) when its own version differs from the loaded driver's, which it reads from the
tray's `proc/driver/nvidia/version` as the real one reads `/proc/driver/nvidia/version`
(no file: no driver loaded, same refusal). Every instance that takes the tray appends a
line to `run/nvidia-emu/starts`, so a test can prove that a daemon never restarted.
States: INITIALIZING → STARTING_AUTH_SERVER → [WAITING_FOR_RECOVERY] → INIT_GPU → READY,
SHUTTING_DOWN on SIGTERM/SIGINT/SIGQUIT. READY is per node: a daemon serves as soon as it
is initialised, whether or not its peers are there (`-q`); the domain's health is `-N`'s
business (UP / DEGRADED / DOWN).

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

Peers. The nodes file lists one IP or host name per line (line number = index). Names are
resolved as glibc resolves them, through `/etc/hosts` of the daemon's own mount namespace
(in a pod: the pod's copy; IMEX_EMU_HOSTS names a stand-in where there is no namespace;
the tray's own host name resolves to its IP), at start and on SIGUSR1 only. A name that
does not resolve is a node that cannot be reached: its cell stays N (never connected), or
keeps its R/D history, and its row in `-N` is all I. Each daemon connects to every peer
from its own BIND_INTERFACE_IP (empty: the tray's IP) and exchanges a hello (index, node
map key, version, instance id); a differing map or version is `!M!` / `!V!` and never
talked to. Connection cells: C connected; N never connected; R recovering — lost, clean up
not yet triggered; D disconnected — clean up triggered. A lost peer is R until the grace
time passes (`IMEX_NODE_DISCONNECTED_GRACE_TIME`; 0 at once, -1 never), then D. A peer
that shuts down gracefully says so (D at once: what it shared is gone); a peer that comes
back as a new instance (a restart) is cleaned up at once, whatever the grace time; the
same instance coming back within the grace time is C again with nothing cleaned up.

Status exchange. Nothing is broadcast. `-N` asks each connected peer for its row once
(one message out, one back per peer) and answers when all have replied (2 s at most), so
what a query costs grows linearly with the peers, and an idle domain exchanges nothing.

Command service (IMEX_CMD_ENABLED=1): TCP on IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT
and/or the unix socket IMEX_CMD_UNIX_DOMAIN_PATH. `nvidia-imex-ctl` sends its flags on one
line; `-q` is one word, `-N` the legend, nodes, matrix and "Domain State", `-j` JSON, `-H`
host names.

Signals. SIGUSR1 re-reads the hosts file, re-resolves every name and reconnects to peers
whose address changed or appeared; established connections to unchanged addresses stay as
they are (no restart, nothing cleaned up). As NVIDIA documents, SIGUSR1 is processed at
most once every 5 seconds: one arriving within 5 s of the last processed one is ignored
(and logged as such). SIGHUP does not reload anything: it dumps the buffered messages
above LOG_LEVEL to the log (as the real one does; the buffer is also dumped at shutdown).
LOG_LEVEL: 0 nothing, 1 critical, 2 error, 3 warning, 4 info (default).

Fault knobs (the world, not our code), JSON in `run/nvidia-emu/faults.json` (plus env
IMEX_EMU_FAULTS at start). Read at start; re-read when the daemon gets SIGUSR2 (an
emulator-only signal; `tray.set_faults` sends it to a running daemon):
  start_delay_s   initialise this much slower (at start)
  crash_after_s   exit uncleanly this long after start
  refuse_peers    [IP, ...]: connections from these addresses are dropped on arrival
  cut_peers       [IP, ...]: all traffic with these addresses is cut — established
                  connections drop without a goodbye, none are made (live: a cut for N
                  seconds then restored is a network blip). Both ends notice at once;
                  a real daemon would notice a silent network at its keepalive timeout.
  version         this tray runs another driver release (driver and IMEX alike): peers
                  see !V!
  imex_version    the installed nvidia-imex is of another release than the loaded driver:
                  the daemon refuses to start
  stale_node_map  an extra nodes-file entry, as if this tray kept an old nodes file (!M!)
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found,unused-ignore]  # no stub; `signal` costs 5 ms
import _socket
import errno
import fcntl
import os
import select
import sys
import time
import zlib

from nodeagent.emulator.imexfiles import (
    Fatal,
    driver_version,
    hosts_file,
    imex_mgmt_problem,
    is_ip,
    read_config,
    read_hosts,
    read_json,
    read_json_text,
    read_nodes,
    read_text,
    tray_root,
    write_atomic,
)
from nodeagent.emulator.imexview import CELL_WORDS, NodeView, render_json, render_text

DEFAULT_VERSION = "580.82.07"
LEVELS = {1: "CRITICAL", 2: "ERROR", 3: "WARNING", 4: "INFO"}
USR1_INTERVAL_S = 5.0  # NVIDIA: SIGUSR1 is processed at most once every 5 seconds
RETRY_FIRST_S = 0.1  # a peer that comes up calls us, and we call back at once: retries
RETRY_MAX_S = 10.0  # only matter for peers that are up but have not called
QUERY_TIMEOUT_S = 2.0
PERSIST_BATCH_S = 0.05  # persist.dat changes are written together within this
VERBOSE_BUFFER = 2000  # lines kept for SIGHUP
EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT
EPOLLERR = select.EPOLLERR | select.EPOLLHUP
SHUTDOWN_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGQUIT)


class Link:
    """One connection: outbound to a peer, inbound from a peer, or a ctl client."""

    __slots__ = (
        "addr", "closing", "connecting", "fd", "kind", "mask", "peer", "rbuf", "sock", "up",
        "wbuf",
    )  # fmt: skip

    def __init__(self, sock: _socket.socket, kind: str, peer: int = -1, addr: str = "") -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.kind = kind  # "out" | "in" | "cmd"
        self.peer = peer
        self.addr = addr
        self.rbuf = b""
        self.wbuf = b""
        self.up = False  # out: handshake done; in: hello received
        self.connecting = kind == "out"  # out: the TCP connect has not completed yet
        self.closing = False
        self.mask = 0  # the events epoll watches for it


class Query:
    """A `-N` waiting for its peers' rows."""

    __slots__ = ("deadline", "flags", "link", "qid", "rows", "waiting")

    def __init__(self, qid: int, link: Link, flags: list[str], waiting: set[int]) -> None:
        self.qid, self.link, self.flags, self.waiting = qid, link, flags, waiting
        self.deadline = time.monotonic() + QUERY_TIMEOUT_S
        self.rows: dict[int, list[str]] = {}


class Daemon:
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
        self.ep = select.epoll()
        self.links: dict[int, Link] = {}
        self.queries: dict[int, Query] = {}
        self.next_query = 1
        self.stop = False
        self.usr1_at: float | None = None
        self.persist_dirty = False
        self.persist_due = 0.0  # when a pending persist.dat write is made (see dirty_persist)
        self.recovery_deadline: float | None = None
        self.recovering: set[int] = set()
        self.importers: set[int] = set()
        self.seen_status: dict[int, str] = {}
        self.listeners: dict[int, tuple[_socket.socket, str]] = {}
        self.unix_path = ""
        self.row = b""  # this node's row for `-N` answers, built when first asked
        self.out: dict[int, Link | None] = {}  # peer index → our connection to it
        self.served = [0, 0, 0]  # -q asked, -N asked, rows sent to peers' -N (see shutdown)
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

    # --- start ----------------------------------------------------------------------------
    def start(self) -> None:
        if self.cfg.get("LOG_FILE_NAME"):
            self.log_fh = open(self.cfg["LOG_FILE_NAME"], "a", encoding="utf-8")  # noqa: SIM115
        self.take_tray_lock()
        self.count_start()
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
        self.read_node_map()
        delay = float(self.faults.get("start_delay_s") or 0)
        if delay:
            self.sleep(delay)  # a slow initialisation (fault knob); SIGTERM still stops it
            if self.stop:
                return
        self.set_state("STARTING_AUTH_SERVER")
        self.server = self.listen_tcp(self.ip, self.port, "peer")
        self.open_command_service()
        self.decide_recovery()
        if not self.recovering:
            self.become_ready()

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

    def count_start(self) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(os.path.join(self.emu_dir, "starts"), "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {stamp}\n")

    def check_driver(self) -> None:
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
        peers = [k for k in range(len(self.entries)) if k != self.index]
        self.out = dict.fromkeys(peers)
        self.cells: dict[int, str] = dict.fromkeys(peers, "N")
        self.retry_at: dict[int, float] = dict.fromkeys(peers, 0.0)  # peers to (re)call
        self.retry_delay: dict[int, float] = dict.fromkeys(peers, RETRY_FIRST_S)
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
            addrs.append(addr)
        return addrs

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stop and time.monotonic() < deadline:
            for _fd, _ev in self.ep.poll(max(0.0, deadline - time.monotonic())):
                self.on_signals()

    def listen_tcp(self, ip: str, port: int, what: str) -> _socket.socket:
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError as exc:
            raise Fatal(f"cannot listen for {what} connections on {ip}:{port}: {exc}")
        return self.listening(sock, what)

    def listening(self, sock: _socket.socket, what: str) -> _socket.socket:
        sock.listen(256)
        sock.setblocking(False)
        self.ep.register(sock.fileno(), EPOLLIN)
        self.listeners[sock.fileno()] = (sock, what)
        return sock

    def open_command_service(self) -> None:
        if self.cfg.get("IMEX_CMD_ENABLED", "0") != "1":
            return
        port = self.cfg.get("IMEX_CMD_PORT", "50005")
        if port:
            ip = self.cfg.get("IMEX_CMD_BIND_INTERFACE_IP") or "127.0.0.1"
            self.listen_tcp(ip, int(port), "command")
        path = self.cfg.get("IMEX_CMD_UNIX_DOMAIN_PATH", "")
        if path:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            if os.path.exists(path):
                os.unlink(path)  # left by an instance that did not shut down cleanly
            try:
                sock.bind(path)
            except OSError as exc:
                raise Fatal(f"cannot listen for commands on {path}: {exc}")
            self.unix_path = path
            self.listening(sock, "command")

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
        importers &= set(self.out)
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

    # --- peer links ---------------------------------------------------------------------------
    def hello(self) -> bytes:
        name = self.hostname or "-"
        return (
            f"H {self.index} {self.ip} {name} {self.version} {self.map_key} {self.inst}\n"
        ).encode()

    def send(self, link: Link, data: bytes) -> None:
        link.wbuf += data
        self.flush(link)

    def flush(self, link: Link) -> None:
        if link.wbuf:
            try:
                sent = link.sock.send(link.wbuf)
                link.wbuf = link.wbuf[sent:]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.drop(link)
                return
        if link.closing and not link.wbuf:
            self.drop(link)
            return
        mask = EPOLLIN | (EPOLLOUT if link.wbuf else 0)
        if mask != link.mask and link.fd in self.links:  # a syscall only when it changes
            self.ep.modify(link.fd, mask)
            link.mask = mask

    def add_link(self, link: Link, events: int) -> None:
        self.links[link.fd] = link
        self.ep.register(link.fd, events)
        link.mask = events

    def connect(self, peer: int) -> None:
        addr = self.addrs[peer]
        if addr is None or addr in self.cut:
            return
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        sock.setblocking(False)
        # Linux lets a listener take a port held by a TIME_WAIT socket only when both set
        # SO_REUSEADDR; outbound sockets take ports on this tray's IP, which a restarting
        # daemon on the same IP may want as its SERVER_PORT or IMEX_CMD_PORT.
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.ip, 0))  # peers see which tray is calling
            err = sock.connect_ex((addr, self.port))
        except OSError as exc:
            err = exc.errno or errno.EINVAL
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self.schedule_retry(peer)
            return
        link = Link(sock, "out", peer, addr)
        self.out[peer] = link
        self.add_link(link, EPOLLOUT)

    def schedule_retry(self, peer: int) -> None:
        delay = self.retry_delay[peer]
        self.retry_at[peer] = time.monotonic() + delay
        self.retry_delay[peer] = min(delay * 2, RETRY_MAX_S)

    def call_now(self, peer: int) -> None:
        if self.out[peer] is None:
            self.retry_at[peer] = 0.0
            self.retry_delay[peer] = RETRY_FIRST_S

    def drop(self, link: Link, *, lost: bool = True) -> None:
        if self.links.pop(link.fd, None) is None:
            return
        self.ep.unregister(link.fd)
        link.sock.close()
        if link.kind != "out" or self.out.get(link.peer) is not link:
            return
        peer = link.peer
        self.out[peer] = None
        for query in list(self.queries.values()):
            if peer in query.waiting:
                query.waiting.discard(peer)
                self.maybe_answer(query)
        if link.up and lost and self.cells[peer] == "C":
            self.peer_lost(peer)
        self.schedule_retry(peer)

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

    def note_instance(self, peer: int, inst: str) -> None:
        """A hello names the peer's instance: a new one means the old one is gone."""
        old = self.peer_inst.get(peer)
        self.peer_inst[peer] = inst
        if old is None or old == inst:
            return
        if self.cells[peer] in ("C", "R"):
            self.clean_up(peer, "it restarted (a new IMEX instance)")
        link = self.out[peer]
        if link is not None and link.up:
            self.drop(link, lost=False)  # it was talking to the instance that died

    def mismatch(self, words: list[str]) -> str | None:
        if words[5] != self.map_key:
            return "!M!"
        if words[4] != self.version:
            return "!V!"
        return None

    def on_hello_out(self, link: Link, words: list[str]) -> None:
        peer = link.peer
        bad = self.mismatch(words)
        if bad:
            self.set_cell(peer, bad)
            self.retry_delay[peer] = RETRY_MAX_S
            link.closing = True
            self.flush(link)
            return
        self.note_instance(peer, words[6])
        link.up = True
        self.retry_delay[peer] = RETRY_FIRST_S
        self.lost_until.pop(peer, None)
        if self.cells[peer] == "R":
            self.log(f"node {peer} reconnected (same instance): nothing to clean up")
        self.set_cell(peer, "C")
        if peer not in self.importers:
            self.importers.add(peer)
            self.dirty_persist()
        self.recovered(peer)

    def on_hello_in(self, link: Link, words: list[str]) -> None:
        peer, host = int(words[1]), words[2]
        if host in self.refuse or host in self.cut:
            self.log(f"dropping a connection from {host} (fault knob)")
            self.drop(link)
            return
        link.peer, link.addr, link.up = peer, host, True
        bad = self.mismatch(words)
        link.closing = bad is not None
        if peer in self.out:
            if bad:
                if self.cells[peer] != "C":
                    self.set_cell(peer, bad)
            else:
                self.note_instance(peer, words[6])
                if self.out[peer] is None:
                    self.call_now(peer)  # it is up (it called us): call back now
                self.recovered(peer)
        self.send(link, self.hello())

    def on_peer_line(self, link: Link, line: str) -> None:
        words = line.split()
        if not words:
            return
        kind = words[0]
        if kind == "H" and len(words) == 7:
            if link.kind == "out":
                self.on_hello_out(link, words)
            else:
                self.on_hello_in(link, words)
        elif kind == "A" and link.kind == "in" and link.up:
            self.served[2] += 1
            self.send(link, self.row_reply(words[1]))
        elif kind == "R" and link.kind == "out":
            query = self.queries.get(int(words[1]))
            if query is not None and link.peer in query.waiting:
                query.rows[link.peer] = words[2:]
                query.waiting.discard(link.peer)
                self.maybe_answer(query)
        elif kind == "B" and link.peer in self.out:
            self.peer_said_goodbye(link.peer)
            self.drop(link, lost=False)

    def peer_said_goodbye(self, peer: int) -> None:
        if self.cells[peer] in ("C", "R"):
            self.clean_up(peer, "it shut down")
        self.peer_inst.pop(peer, None)
        link = self.out[peer]
        if link is not None:
            self.drop(link, lost=False)

    def row_reply(self, qid: str) -> bytes:
        if not self.row:  # kept until a state or a cell changes: answering is one send
            cells = " ".join(f"{k}:{c}" for k, c in self.cells.items())
            self.row = f" {self.state} {self.version} {self.hostname or '-'} {cells}\n".encode()
        return b"R " + qid.encode() + self.row

    # --- the command service ------------------------------------------------------------------
    def on_command(self, link: Link, line: str) -> None:
        if self.persist_dirty:
            self.write_persist()
        flags = line.split()
        if "-q" in flags:
            self.served[0] += 1
            self.reply(link, self.state + "\n")
            return
        self.served[1] += 1
        up = [(k, out) for k, out in self.out.items() if out is not None and out.up]
        query = Query(self.next_query, link, flags, {k for k, _ in up})
        self.next_query += 1
        self.queries[query.qid] = query
        ask = f"A {query.qid}\n".encode()
        for _, out in up:
            self.send(out, ask)  # a failed send drops the link, which stops the wait for it
        self.maybe_answer(query)

    def maybe_answer(self, query: Query, *, timed_out: bool = False) -> None:
        if (query.waiting and not timed_out) or self.queries.pop(query.qid, None) is None:
            return
        if self.links.get(query.link.fd) is query.link:  # the client may have gone
            self.reply(query.link, self.render(query))

    def reply(self, link: Link, text: str) -> None:
        link.closing = True
        self.send(link, text.encode())

    def domain_view(self, query: Query) -> tuple[str, list[NodeView]]:
        """(domain state, one dict per node) as this daemon sees the domain right now."""
        nodes = []
        all_up = self.state == "READY"
        for k, host in enumerate(self.entries):
            if k == self.index:
                status, version, name, row = self.state, self.version, self.hostname, self.cells
            elif k in query.rows:
                words = query.rows[k]
                status, version, name = words[0], words[1], "" if words[2] == "-" else words[2]
                row = {int(j): c for j, _, c in (w.partition(":") for w in words[3:])}
            else:
                status, version, name, row = "UNAVAILABLE", "", "", {}
            cells = [(j, "C" if j == k else row.get(j, "I")) for j in range(len(self.entries))]
            all_up = all_up and status == "READY" and all(c == "C" for _, c in cells)
            changed = self.seen_status.get(k) != status
            self.seen_status[k] = status
            nodes.append(NodeView(status, host, version, name, changed, cells))
        if all_up:
            return "UP", nodes
        return ("DEGRADED" if self.state == "READY" else "DOWN"), nodes

    def render(self, query: Query) -> str:
        domain, nodes = self.domain_view(query)
        if "-j" in query.flags:
            return render_json(domain, nodes, self.entries, "-H" in query.flags)
        return render_text(domain, nodes, "-H" in query.flags)

    # --- signals ------------------------------------------------------------------------------
    def on_signals(self) -> None:
        try:
            data = os.read(self.signal_fd, 64)
        except BlockingIOError:
            return
        for signum in data:
            if signum in SHUTDOWN_SIGNALS:
                self.stop = True
            elif signum == _signal.SIGUSR1:
                self.on_usr1()
            elif signum == _signal.SIGUSR2:
                self.faults = read_json(os.path.join(self.emu_dir, "faults.json"))
                self.apply_faults()
                self.log(f"SIGUSR2 (emulator): fault knobs re-read: {sorted(self.faults)}")
                self.apply_cuts()
            elif signum == _signal.SIGHUP:
                self.log("SIGHUP: dumping the verbose log buffer (configuration not reloaded)")
                self.dump_verbose()

    def on_usr1(self) -> None:
        now = time.monotonic()
        if self.usr1_at is not None and now - self.usr1_at < USR1_INTERVAL_S:
            self.log(
                f"SIGUSR1 ignored: the last one was processed {now - self.usr1_at:.1f} s ago "
                f"(at most one every {USR1_INTERVAL_S:.0f} s)",
                3,
            )
            return
        self.usr1_at = now
        if not self.out:
            return  # still initialising (names are resolved next), or no peers at all
        fresh = self.resolve_all()
        changed = 0
        for peer in self.out:
            if fresh[peer] != self.addrs[peer]:
                changed += 1
                self.log(f"node {peer} ({self.entries[peer]}): {self.addrs[peer]} -> {fresh[peer]}")
                self.addrs[peer] = fresh[peer]
                link = self.out[peer]
                if link is not None:
                    self.drop(link)  # that address is no longer this node
                self.call_now(peer)
            elif self.out[peer] is None:
                self.call_now(peer)
        self.log(f"SIGUSR1: names re-resolved, {changed} address(es) changed; reconnecting")

    def apply_cuts(self) -> None:
        for link in list(self.links.values()):
            cut = link.addr in self.cut or (link.kind == "in" and link.addr in self.refuse)
            if cut and link.kind != "cmd":
                self.drop(link)  # silently: a cut network says no goodbye
        for peer, out in self.out.items():
            if out is None and self.addrs[peer] not in self.cut:
                self.call_now(peer)

    # --- loop -----------------------------------------------------------------------------
    def run(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        self.signal_fd = rfd
        _signal.set_wakeup_fd(wfd)
        for sig in (*SHUTDOWN_SIGNALS, _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGHUP):
            _signal.signal(sig, _ignore)
        self.ep.register(rfd, EPOLLIN)
        try:
            self.start()
        except (Fatal, OSError) as exc:
            self.log(str(exc), 1)
            if self.log_fh is not sys.stderr or self.log_level < 1:
                print(f"nvidia-imex: {exc}", file=sys.stderr, flush=True)
            return 1
        while not self.stop:
            timeout = self.timers(time.monotonic())
            for fd, events in self.ep.poll(timeout):
                self.dispatch(fd, events)
        return self.shutdown()

    def timers(self, now: float) -> float:
        """Run what is due; returns how long the loop may sleep (-1: until something happens)."""
        if self.crash_at is not None and now >= self.crash_at:
            self.log("crashing (fault knob crash_after_s)", 1)
            if self.persist_dirty:
                self.write_persist()
            os._exit(1)
        due = [self.crash_at] if self.crash_at is not None else []
        if self.persist_dirty:
            if self.persist_due <= now:
                self.write_persist()
            else:
                due.append(self.persist_due)
        if self.retry_at:  # empty once every peer is connected: an idle loop scans nothing
            for peer, at in list(self.retry_at.items()):
                if at <= now:
                    del self.retry_at[peer]
                    self.connect(peer)  # an unreachable peer waits for SIGUSR1 or a restore
            due.extend(self.retry_at.values())
        for peer, until in list(self.lost_until.items()):
            if until <= now:
                self.clean_up(peer, f"not back within the grace time ({self.grace:g} s)")
            else:
                due.append(until)
        if self.recovery_deadline is not None:
            if self.recovery_deadline <= now:
                self.give_up_recovery()
            else:
                due.append(self.recovery_deadline)
        for query in list(self.queries.values()):
            if query.deadline <= now:
                self.maybe_answer(query, timed_out=True)
            else:
                due.append(query.deadline)
        return max(0.0, min(due) - now) if due else -1

    def dispatch(self, fd: int, events: int) -> None:
        if fd == self.signal_fd:
            self.on_signals()
            return
        if fd in self.listeners:
            sock, what = self.listeners[fd]
            try:
                new_fd, _ = sock._accept()  # type: ignore[attr-defined]  # not in the stub
            except (BlockingIOError, InterruptedError):
                return
            conn = _socket.socket(fileno=new_fd)
            conn.setblocking(False)
            self.add_link(Link(conn, "in" if what == "peer" else "cmd"), EPOLLIN)
            return
        link = self.links.get(fd)
        if link is None:
            return
        if link.connecting:
            if link.sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR):
                self.drop(link)
            else:
                link.connecting = False
                self.send(link, self.hello())
            return
        if events & EPOLLOUT:
            self.flush(link)
        if events & (EPOLLIN | EPOLLERR) and link.fd in self.links:
            self.on_readable(link)

    def on_readable(self, link: Link) -> None:
        try:
            data = link.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.drop(link)
            return
        link.rbuf += data
        while b"\n" in link.rbuf and link.fd in self.links:
            raw, _, link.rbuf = link.rbuf.partition(b"\n")
            line = raw.decode("ascii", "replace")
            if link.kind == "cmd":
                self.on_command(link, line)
                return
            self.on_peer_line(link, line)

    def shutdown(self) -> int:
        self.set_state("SHUTTING_DOWN")
        for link in list(self.links.values()):
            if link.kind != "cmd" and (link.kind == "in" or link.up):
                try:  # noqa: SIM105 - contextlib costs a daemon start more than this
                    link.sock.send(link.wbuf + b"B\n")  # peers drop what we shared at once
                except OSError:
                    pass
            self.drop(link, lost=False)
        self.importers.clear()
        self.recovering.clear()
        self.write_persist()  # a clean shutdown leaves only the key: no recovery wait
        if self.unix_path:
            os.unlink(self.unix_path)
        self.lock_fh.seek(0)
        self.lock_fh.truncate()
        self.lock_fh.write("stopped\n")
        self.lock_fh.flush()
        self.log("IMEX daemon stopped")
        self.dump_verbose()
        with open(os.path.join(self.emu_dir, "served"), "a", encoding="utf-8") as fh:
            cpu_ms = round(time.process_time() * 1000, 1)  # this process's CPU so far (since exec)
            fh.write(" ".join(map(str, [*self.served, cpu_ms])) + "\n")  # bench/formation.py
        return 0


def _ignore(signum: int, frame: object) -> None:
    """The wakeup fd carries the signal to the loop; the handler itself does nothing."""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    config = "/etc/nvidia-imex/config.cfg"
    if "-c" in args:
        at = args.index("-c")
        if at + 1 >= len(args):
            print("nvidia-imex: -c needs a config file path", file=sys.stderr)
            return 2
        config = args[at + 1]
    try:
        cfg = read_config(config)
    except OSError as exc:
        print(f"nvidia-imex: cannot read the config file {config}: {exc}", file=sys.stderr)
        return 1
    if cfg.get("DAEMONIZE", "1") == "1":
        # The real daemon forks into the background by default; an agent sets DAEMONIZE=0.
        if os.fork():
            return 0
        os.setsid()
    return Daemon(config, cfg).run()


if __name__ == "__main__":
    sys.exit(main())
