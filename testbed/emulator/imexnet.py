# SPDX-License-Identifier: Apache-2.0
"""The emulated daemon's sockets: its server and command ports, and its peer connections.

Each daemon listens on its BIND_INTERFACE_IP (empty: the tray's IP) at SERVER_PORT and
connects to every peer from that same address, so peers see which tray is calling. On
connecting, both ends exchange a hello (index, node map key, version, instance id); a
differing map or version is `!M!` / `!V!` and never talked to. A peer that shuts down
gracefully says so (D at once: what it shared is gone); a peer that comes back as a new
instance (a restart) is cleaned up at once, whatever the grace time; the same instance
coming back within the grace time is C again with nothing cleaned up. A peer that is not up
is called again with a growing delay; one that comes up calls us, and we call back at once.

The command service (IMEX_CMD_ENABLED=1) listens on IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT
and/or the unix socket IMEX_CMD_UNIX_DOMAIN_PATH; what it answers is imexcontrol.py's.
"""

from __future__ import annotations

import _socket
import errno
import os
import select
import time

from testbed.emulator.imexfiles import Fatal
from testbed.emulator.imexstate import DaemonState

RETRY_FIRST_S = 0.1  # a peer that comes up calls us, and we call back at once: retries
RETRY_MAX_S = 10.0  # only matter for peers that are up but have not called
EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT
EPOLLERR = select.EPOLLERR | select.EPOLLHUP


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


class PeerNetwork(DaemonState):
    """The daemon's listeners and links, on one epoll; peers called, greeted and dropped."""

    server: _socket.socket

    def __init__(self, config_path: str, cfg: dict[str, str]) -> None:
        self.ep = select.epoll()
        self.links: dict[int, Link] = {}
        self.listeners: dict[int, tuple[_socket.socket, str]] = {}
        self.unix_path = ""
        self.out: dict[int, Link | None] = {}  # peer index → our connection to it
        super().__init__(config_path, cfg)

    def read_node_map(self) -> None:
        super().read_node_map()
        self.out = dict.fromkeys(self.peers)
        self.retry_at: dict[int, float] = dict.fromkeys(self.peers, 0.0)  # peers to (re)call
        self.retry_delay: dict[int, float] = dict.fromkeys(self.peers, RETRY_FIRST_S)

    def stop_waiting_for(self, peer: int) -> None:
        """Our link to `peer` is gone: whatever waits for its reply stops waiting (the
        control surface's `-N` queries)."""

    # --- listeners ------------------------------------------------------------------------------
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

    def accept(self, fd: int) -> None:
        sock, what = self.listeners[fd]
        try:
            new_fd, _ = sock._accept()  # type: ignore[attr-defined]  # not in the stub
        except (BlockingIOError, InterruptedError):
            return
        conn = _socket.socket(fileno=new_fd)
        conn.setblocking(False)
        self.add_link(Link(conn, "in" if what == "peer" else "cmd"), EPOLLIN)

    # --- links ----------------------------------------------------------------------------------
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

    def connected(self, link: Link) -> None:
        """An outbound connect completed, or failed."""
        if link.sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR):
            self.drop(link)
        else:
            link.connecting = False
            self.send(link, self.hello())

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
        self.stop_waiting_for(peer)
        if link.up and lost and self.cells[peer] == "C":
            self.peer_lost(peer)
        self.schedule_retry(peer)

    def apply_cuts(self) -> None:
        for link in list(self.links.values()):
            cut = link.addr in self.cut or (link.kind == "in" and link.addr in self.refuse)
            if cut and link.kind != "cmd":
                self.drop(link)  # silently: a cut network says no goodbye
        for peer, out in self.out.items():
            if out is None and self.addrs[peer] not in self.cut:
                self.call_now(peer)

    # --- hellos and goodbyes ------------------------------------------------------------------
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

    def peer_said_goodbye(self, peer: int) -> None:
        if self.cells[peer] in ("C", "R"):
            self.clean_up(peer, "it shut down")
        self.peer_inst.pop(peer, None)
        link = self.out[peer]
        if link is not None:
            self.drop(link, lost=False)

    def say_goodbye(self) -> None:
        """Shutting down: every peer link is told (peers drop what we shared at once)."""
        for link in list(self.links.values()):
            if link.kind != "cmd" and (link.kind == "in" or link.up):
                try:  # noqa: SIM105 - contextlib costs a daemon start more than this
                    link.sock.send(link.wbuf + b"B\n")
                except OSError:
                    pass
            self.drop(link, lost=False)
