# SPDX-License-Identifier: Apache-2.0
"""Emulated `nvidia-imex`: one per tray, really talking to its peers over TCP.

Usage: `nvidia-imex -c <config>` (this file runs as a script or `python -m`). Stdlib only and
single-threaded (one `selectors` loop), so that a fleet of 144 emulated trays starts fast on a
small machine.

What it does, as documented for NVIDIA's daemon (reference/IMEX-FACTS.md):
- reads `KEY=VALUE` config (SERVER_PORT, BIND_INTERFACE_IP, IMEX_CMD_ENABLED, IMEX_CMD_PORT,
  IMEX_CMD_BIND_INTERFACE_IP, IMEX_NODE_CONFIG_FILE, LOG_FILE_NAME, ...) once at start, and
  the nodes file (line number = node index);
- walks INITIALIZING → STARTING_AUTH_SERVER → [WAITING_FOR_RECOVERY] → WAITING_FOR_PEERS →
  INIT_GPU → READY, and SHUTTING_DOWN on SIGTERM/SIGINT;
- connects to every peer's SERVER_PORT from its own BIND_INTERFACE_IP, exchanges the node map
  (a hash of the nodes file) and its version; a peer whose map or version differs is shown as
  `!M!` / `!V!` and never talked to;
- READY once connected to every peer (the whole domain serves one workload);
- serves IMEX_CMD_PORT: the emulated `nvidia-imex-ctl` sends its flags on one line and prints
  the reply (`-q` one word, `-N` legend + matrix + "Domain State", `-j` JSON, `-H` host names);
- SIGUSR1 drops and re-opens every peer connection; SIGHUP is ignored (no reload);
- a second daemon on the same tray exits with NV_ERR_IN_USE.

Fault knobs (JSON), from env IMEX_EMU_FAULTS or `<tray root>/run/nvidia-emu/faults.json`:
`start_delay_s`, `crash_after_s` (exit uncleanly N s after start), `refuse_peers` (list of
IPs whose connections are dropped), `version` (report this version instead),
`stale_node_map` (an extra nodes-file entry, as if this tray kept an old nodes file).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import os
import selectors
import signal
import socket
import sys
import time

DEFAULT_VERSION = "580.82.07"
CELL_WORDS = {
    "C": "CONNECTED",
    "N": "NEVER_CONNECTED",
    "R": "RECOVERING",
    "D": "DISCONNECTED",
    "I": "INVALID",
    "!V!": "VERSION_MISMATCH",
    "!M!": "NODE_MAP_MISMATCH",
}
LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggered.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""
RETRY_FIRST_S = 0.02
RETRY_MAX_S = 0.5
KEEPALIVE_S = 5.0


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


def tray_root(config_path: str) -> str:
    """The emulated tray's root: IMEX_EMU_ROOT, or the dir above `etc/nvidia-imex/`."""
    if os.environ.get("IMEX_EMU_ROOT"):
        return os.environ["IMEX_EMU_ROOT"]
    cfg_dir = os.path.dirname(os.path.abspath(config_path))
    if cfg_dir.endswith(os.path.join("etc", "nvidia-imex")):
        return os.path.dirname(os.path.dirname(cfg_dir))
    return cfg_dir


def load_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return {}


class Link:
    """One TCP connection: outbound to a peer, inbound from a peer, or a ctl client."""

    def __init__(self, sock: socket.socket, kind: str, peer: int | None = None) -> None:
        self.sock = sock
        self.kind = kind  # "out" | "in" | "cmd"
        self.peer = peer
        self.rbuf = b""
        self.wbuf = b""
        self.stage = "connecting" if kind == "out" else "open"
        self.close_after_write = False
        self.host_name = ""


class Daemon:
    def __init__(self, config_path: str) -> None:
        self.config_path = config_path
        self.cfg = read_config(config_path)
        self.root = tray_root(config_path)
        emu_dir = os.path.join(self.root, "run", "nvidia-emu")
        self.emu_dir = emu_dir
        faults = load_json(os.path.join(emu_dir, "faults.json"))
        if os.environ.get("IMEX_EMU_FAULTS"):
            faults.update(json.loads(os.environ["IMEX_EMU_FAULTS"]))
        self.faults = faults
        facts = load_json(os.path.join(emu_dir, "fabric.json"))
        self.hostname = facts.get("hostname") or socket.gethostname()
        self.version = str(faults.get("version") or facts.get("driver_version") or DEFAULT_VERSION)
        self.ip = self.cfg.get("BIND_INTERFACE_IP", "127.0.0.1")
        self.port = int(self.cfg.get("SERVER_PORT", "50000"))
        self.nodes = read_nodes(
            self.cfg.get("IMEX_NODE_CONFIG_FILE", "/etc/nvidia-imex/nodes_config.cfg")
        )
        if faults.get("stale_node_map"):
            # as if this tray kept an old nodes file with one more entry: peers see !M!
            self.nodes.append(str(faults["stale_node_map"]))
        self.map_hash = hashlib.sha256("\n".join(self.nodes).encode()).hexdigest()[:16]
        self.index = self._own_index()
        self.state = "INITIALIZING"
        self.sel = selectors.DefaultSelector()
        self.links: set[Link] = set()
        self.out: dict[int, Link | None] = {}
        self.retry_at: dict[int, float] = {}
        self.retry_delay: dict[int, float] = {}
        self.cells: dict[int, str] = {}  # this node's row of the matrix
        self.remote: dict[int, dict] = {}  # what each peer last told us about itself
        self.last_seen_status: dict[int, str] = {}
        self.stop = False
        self.log_fh = sys.stderr
        self.started = time.monotonic()
        self.last_keepalive = 0.0
        self.dirty = False

    # --- small helpers ------------------------------------------------------------------
    def log(self, message: str) -> None:
        stamp = datetime.datetime.now().strftime("%m/%d/%Y %H:%M:%S.%f")[:-3]
        print(f"[{stamp}] [INFO] [tid {os.getpid()}] {message}", file=self.log_fh, flush=True)

    def _own_index(self) -> int:
        for i, entry in enumerate(self.nodes):
            if entry in (self.ip, self.hostname):
                return i
        return -1

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.log(f"IMEX daemon state {self.state} -> {state}")
            self.state = state
            self.broadcast()

    def set_cell(self, peer: int, cell: str) -> None:
        if self.cells.get(peer) != cell:
            self.log(f"connection to node {peer} ({self.nodes[peer]}): {CELL_WORDS[cell]}")
            self.cells[peer] = cell
            self.broadcast()
            self.check_ready()

    def hello(self) -> dict:
        return {
            "t": "hello",
            "index": self.index,
            "host": self.ip,
            "hostName": self.hostname,
            "version": self.version,
            "map": self.map_hash,
        }

    def status_msg(self) -> dict:
        return {
            "t": "status",
            "index": self.index,
            "state": self.state,
            "version": self.version,
            "row": {str(k): v for k, v in self.cells.items()},
        }

    def send(self, link: Link, message: dict) -> None:
        link.wbuf += (json.dumps(message) + "\n").encode()
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
        if link.close_after_write and not link.wbuf:
            self.drop(link)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if link.wbuf else 0)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.modify(link.sock, events, link)

    def broadcast(self) -> None:
        """Peers hear about a change once per loop pass, however many cells changed in it."""
        self.dirty = True

    def flush_status(self) -> None:
        self.dirty = False
        message = self.status_msg()
        for link in list(self.links):
            if link.kind == "out" and link.stage == "up":
                self.send(link, message)

    # --- start ------------------------------------------------------------------------------
    def take_tray_lock(self) -> None:
        os.makedirs(self.emu_dir, exist_ok=True)
        self.lock_fh = open(os.path.join(self.emu_dir, "imex.lock"), "a+")  # noqa: SIM115
        try:
            fcntl.flock(self.lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(
                "nvidia-imex: another IMEX daemon is running on this node: NV_ERR_IN_USE",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(1)
        self.lock_fh.seek(0)
        previous = self.lock_fh.read().strip()
        self.unclean_before = previous.startswith("running")
        self.lock_fh.seek(0)
        self.lock_fh.truncate()
        self.lock_fh.write(f"running {os.getpid()}\n")
        self.lock_fh.flush()

    def listen(self, ip: str, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, port))
        sock.listen(256)
        sock.setblocking(False)
        return sock

    def start(self) -> None:
        if self.cfg.get("LOG_FILE_NAME"):
            self.log_fh = open(self.cfg["LOG_FILE_NAME"], "a", encoding="utf-8")  # noqa: SIM115
        self.take_tray_lock()
        self.log(f"IMEX version {self.version} starting, config {self.config_path}")
        if self.index < 0:
            self.log(f"this node ({self.ip}) is not in the node config file; exiting")
            sys.exit(1)
        delay = float(self.faults.get("start_delay_s", 0) or 0)
        if delay:
            time.sleep(delay)
        self.set_state("STARTING_AUTH_SERVER")
        try:
            self.server = self.listen(self.ip, self.port)
        except OSError as exc:
            self.log(f"cannot listen on {self.ip}:{self.port}: {exc}")
            sys.exit(1)
        self.sel.register(self.server, selectors.EVENT_READ, "server")
        if self.cfg.get("IMEX_CMD_ENABLED", "0") == "1":
            cmd_ip = self.cfg.get("IMEX_CMD_BIND_INTERFACE_IP") or "127.0.0.1"
            cmd_port = int(self.cfg.get("IMEX_CMD_PORT", "50005"))
            try:
                self.cmd_server = self.listen(cmd_ip, cmd_port)
            except OSError as exc:
                self.log(f"cannot listen for commands on {cmd_ip}:{cmd_port}: {exc}")
                sys.exit(1)
            self.sel.register(self.cmd_server, selectors.EVENT_READ, "cmd")
        if self.unclean_before:
            self.set_state("WAITING_FOR_RECOVERY")
        for peer in range(len(self.nodes)):
            if peer != self.index:
                self.cells[peer] = "N"
                self.out[peer] = None
                self.retry_at[peer] = 0.0
                self.retry_delay[peer] = RETRY_FIRST_S
        self.set_state("WAITING_FOR_PEERS")
        self.check_ready()

    def check_ready(self) -> None:
        if self.state == "WAITING_FOR_PEERS" and all(c == "C" for c in self.cells.values()):
            self.set_state("INIT_GPU")
            self.set_state("READY")

    # --- peers ----------------------------------------------------------------------------
    def connect(self, peer: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        # Linux lets a listener take a port held by a TIME_WAIT socket only when both set
        # SO_REUSEADDR. Outbound sockets take ephemeral ports on this tray's IP, which a
        # (re)starting daemon on the same IP may want as its SERVER_PORT or IMEX_CMD_PORT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.ip, 0))  # peers see which tray is calling
            err = sock.connect_ex((self.nodes[peer], self.port))
        except OSError as exc:
            err = exc.errno or errno.EINVAL
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self.schedule_retry(peer)
            return
        link = Link(sock, "out", peer)
        self.links.add(link)
        self.out[peer] = link
        self.sel.register(sock, selectors.EVENT_WRITE, link)

    def schedule_retry(self, peer: int) -> None:
        delay = self.retry_delay.get(peer, RETRY_FIRST_S)
        self.retry_at[peer] = time.monotonic() + delay
        self.retry_delay[peer] = min(delay * 1.5, RETRY_MAX_S)

    def drop(self, link: Link) -> None:
        if link not in self.links:
            return
        self.links.discard(link)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(link.sock)
        link.sock.close()
        if link.kind == "out" and link.peer is not None and self.out.get(link.peer) is link:
            self.out[link.peer] = None
            cell = self.cells.get(link.peer, "N")
            if cell == "C":
                self.set_cell(link.peer, "D")
            self.schedule_retry(link.peer)
        elif link.kind == "in" and link.peer is not None:
            self.remote.pop(link.peer, None)

    def mismatch(self, message: dict) -> str | None:
        if message.get("map") != self.map_hash:
            return "!M!"
        if message.get("version") != self.version:
            return "!V!"
        return None

    def refused(self, host: str) -> bool:
        return host in (self.faults.get("refuse_peers") or [])

    def on_message(self, link: Link, message: dict) -> None:
        kind = message.get("t")
        if link.kind == "out" and kind == "hello" and link.peer is not None:
            bad = self.mismatch(message)
            if bad:
                self.set_cell(link.peer, bad)
                link.close_after_write = True
                self.flush(link)
                return
            link.stage = "up"
            self.retry_delay[link.peer] = RETRY_FIRST_S
            self.broadcast()
            self.set_cell(link.peer, "C")
        elif link.kind == "in" and kind == "hello":
            peer = message.get("index")
            host = str(message.get("host", ""))
            if self.refused(host):
                self.log(f"refusing connection from {host} (fault knob)")
                self.drop(link)
                return
            link.close_after_write = self.mismatch(message) is not None
            link.host_name = str(message.get("hostName", ""))
            if isinstance(peer, int) and 0 <= peer < len(self.nodes) and peer != self.index:
                link.peer = peer
                if self.out.get(peer) is None and self.cells.get(peer) != "C":
                    # the peer is up (it called us): call back now rather than at the next retry
                    self.retry_at[peer] = 0.0
                    self.retry_delay[peer] = RETRY_FIRST_S
                bad = self.mismatch(message)
                if bad:
                    self.set_cell(peer, bad)
            self.send(link, self.hello())
        elif link.kind == "in" and kind == "status" and link.peer is not None:
            self.remote[link.peer] = message

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
        while b"\n" in link.rbuf and link in self.links:
            line, _, link.rbuf = link.rbuf.partition(b"\n")
            if link.kind == "cmd":
                self.on_command(link, line.decode(errors="replace"))
                return
            try:
                message = json.loads(line)
            except ValueError:
                self.drop(link)
                return
            self.on_message(link, message)

    def on_connected(self, link: Link) -> None:
        err = link.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self.drop(link)
            return
        link.stage = "handshake"
        self.send(link, self.hello())

    # --- the command port -------------------------------------------------------------------
    def domain_view(self) -> dict:
        """The `-N -j` document: the domain as this daemon sees it."""
        nodes: dict[str, dict] = {}
        all_up = self.state == "READY"
        for k, host in enumerate(self.nodes):
            if k == self.index:
                status, version, row, name = self.state, self.version, self.cells, self.hostname
            else:
                seen = self.remote.get(k) if self.cells.get(k) == "C" else None
                status = seen.get("state", "UNAVAILABLE") if seen else "UNAVAILABLE"
                version = seen.get("version", "") if seen else ""
                row = {int(j): c for j, c in (seen or {}).get("row", {}).items()}
                name = self._peer_name(k) if seen is not None else ""
            all_up = all_up and status == "READY"
            connections = {}
            for j, peer_host in enumerate(self.nodes):
                if j == k:
                    continue
                cell = row.get(j, "I") if k != self.index else self.cells.get(j, "N")
                connections[str(j)] = {"host": peer_host, "status": CELL_WORDS[cell], "cell": cell}
                all_up = all_up and cell == "C"
            changed = self.last_seen_status.get(str(k)) != status
            self.last_seen_status[str(k)] = status
            node = {"status": status, "host": host, "version": version, "changed": changed}
            if name:
                node["hostName"] = name
            node["connections"] = connections
            nodes[str(k)] = node
        if all_up:
            domain = "UP"
        elif self.state == "READY":
            domain = "DEGRADED"
        else:
            domain = "DOWN"
        return {"status": domain, "nodes": nodes}

    def _peer_name(self, k: int) -> str:
        for link in self.links:
            if link.kind == "in" and link.peer == k:
                return link.host_name
        return ""

    def render(self, flags: list[str]) -> str:
        if "-q" in flags:
            return self.state + "\n"
        view = self.domain_view()
        if "-j" in flags:
            if "-H" not in flags:
                for node in view["nodes"].values():
                    node.pop("hostName", None)
            for node in view["nodes"].values():
                for conn in node["connections"].values():
                    conn.pop("cell", None)
            return json.dumps(view, indent=2) + "\n"
        return self.render_text(view, "-H" in flags)

    def render_text(self, view: dict, hostnames: bool) -> str:
        now = datetime.datetime.now()
        lines = [LEGEND, f"{now.month}/{now.day}/{now.year} {now:%H:%M:%S.%f}"[:-3], "Nodes:"]
        for k, node in view["nodes"].items():
            host = node["host"] + (
                f" ({node['hostName']})" if hostnames and "hostName" in node else ""
            )
            lines.append(
                f"Node #{k:<3} - {host:<15} - {node['status']:<20} - Version: {node['version']}"
            )
        size = len(self.nodes)
        lines.append("")
        lines.append(" Nodes From\\To  " + "".join(f"{j:<4}" for j in range(size)))
        for k in range(size):
            node = view["nodes"][str(k)]
            cells = []
            for j in range(size):
                cells.append("C" if j == k else node["connections"][str(j)]["cell"])
            lines.append(f"       {k:<8} " + "".join(f"{c:<4}" for c in cells))
        lines.append(f"Domain State: {view['status']}")
        return "\n".join(lines) + "\n"

    def on_command(self, link: Link, line: str) -> None:
        link.wbuf += self.render(line.split()).encode()
        link.close_after_write = True
        self.flush(link)

    # --- loop -----------------------------------------------------------------------------
    def on_signal(self, signum: int) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.stop = True
        elif signum == signal.SIGUSR1:
            self.log("SIGUSR1: re-resolving peers and reconnecting")
            for link in list(self.links):
                if link.kind == "out":
                    self.drop(link)
            for peer in self.retry_at:
                self.retry_at[peer] = 0.0
                self.retry_delay[peer] = RETRY_FIRST_S
        elif signum == signal.SIGHUP:
            self.log("SIGHUP ignored: the configuration is read only at start")

    def run(self) -> int:
        rpipe, wpipe = os.pipe()
        os.set_blocking(rpipe, False)
        os.set_blocking(wpipe, False)
        signal.set_wakeup_fd(wpipe)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(sig, lambda *_: None)
        self.start()
        self.sel.register(rpipe, selectors.EVENT_READ, "signal")
        crash_after = float(self.faults.get("crash_after_s", 0) or 0)
        while not self.stop:
            now = time.monotonic()
            if crash_after and now - self.started >= crash_after:
                self.log("crashing (fault knob crash_after_s)")
                os._exit(1)
            for peer, link in self.out.items():
                if link is None and self.retry_at[peer] <= now:
                    self.connect(peer)
            if now - self.last_keepalive >= KEEPALIVE_S:
                self.last_keepalive = now
                self.broadcast()
            waits = [self.retry_at[p] - now for p, lk in self.out.items() if lk is None]
            timeout = max(0.0, min([KEEPALIVE_S, *waits]))
            for key, events in self.sel.select(0 if self.dirty else timeout):
                self.dispatch(key, events, rpipe)
            if self.dirty:
                self.flush_status()
        return self.shutdown()

    def dispatch(self, key: selectors.SelectorKey, events: int, rpipe: int) -> None:
        data = key.data
        if data == "signal":
            with contextlib.suppress(OSError):
                for signum in os.read(rpipe, 64):
                    self.on_signal(signum)
        elif data in ("server", "cmd"):
            with contextlib.suppress(BlockingIOError, InterruptedError):
                sock, _ = key.fileobj.accept()  # type: ignore[union-attr]
                sock.setblocking(False)
                link = Link(sock, "in" if data == "server" else "cmd")
                self.links.add(link)
                self.sel.register(sock, selectors.EVENT_READ, link)
        elif isinstance(data, Link):
            if data.kind == "out" and data.stage == "connecting":
                if events & selectors.EVENT_WRITE:
                    self.on_connected(data)
                return
            if events & selectors.EVENT_WRITE:
                self.flush(data)
            if events & selectors.EVENT_READ and data in self.links:
                self.on_readable(data)

    def shutdown(self) -> int:
        self.set_state("SHUTTING_DOWN")
        self.flush_status()
        for link in list(self.links):
            self.drop(link)
        self.lock_fh.seek(0)
        self.lock_fh.truncate()
        self.lock_fh.write("stopped\n")
        self.lock_fh.flush()
        self.log("IMEX daemon stopped")
        return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    config = "/etc/nvidia-imex/config.cfg"
    if "-c" in args:
        at = args.index("-c")
        if at + 1 >= len(args):
            print("nvidia-imex: -c needs a config file path", file=sys.stderr)
            return 2
        config = args[at + 1]
    if not os.path.exists(config):
        print(f"nvidia-imex: config file {config} not found", file=sys.stderr)
        return 1
    daemon = Daemon(config)
    if daemon.cfg.get("DAEMONIZE", "0") == "1":
        # The real daemon forks into the background; an agent always sets DAEMONIZE=0.
        if os.fork():
            return 0
        os.setsid()
    return daemon.run()


if __name__ == "__main__":
    sys.exit(main())
