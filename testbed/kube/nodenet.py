"""The real nodes' network: a fabric namespace joining the nodes, and the host's loopback
services (the API server, the portal) made reachable inside each node.

Every address here exists only inside network namespaces the fixture creates and removes:

- the fabric: a network namespace (held by a sleeping process of its own) with a bridge;
  each node's namespace is joined to it by a veth pair made inside the fabric namespace,
  the node's end (`eth0`) holding the node's IP (`10.<base>.0.<n>/24`). The nodes reach
  each other there (the trays' IMEX daemons peer on their node IPs) and nothing else: the
  fabric has no route out;
- the control plane and the portal listen on the host's 127.0.0.1. A `Forwarder` listens
  on the same port of 127.0.0.1 *inside* a node's namespace (the socket is made by a thread
  that enters that namespace with setns(2) and comes back) and relays each connection to
  the host's loopback, so a kubeconfig or a portal URL means the same thing on the host
  and on the node.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(pid: int) -> Iterator[None]:
    """This thread in the network namespace of process `pid`, then back in its own."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


def ip(pid: int, *args: str, check: bool = True) -> None:
    """`ip ARGS` in the network namespace of `pid` (nsenter: never the host's)."""
    subprocess.run(["nsenter", "-t", str(pid), "-n", "--", "ip", *args], check=check,
                   capture_output=True, text=True)  # fmt: skip


def join_fabric(fabric_pid: int, node_pid: int, index: int, address: str) -> None:
    """A veth pair from the fabric's bridge to the node (`eth0`, `address`), made in the
    fabric namespace and its node end moved straight into the node's."""
    fabric_end = f"vn{index}"
    # The pair of the node's last boot: the kernel tears a dead network namespace down in
    # the background, so after a reboot its fabric end may still be there for a moment
    # ("File exists"). Deleting it takes its peer in the dying namespace with it.
    ip(fabric_pid, "link", "del", fabric_end, check=False)
    ip(fabric_pid, "link", "add", fabric_end, "type", "veth", "peer", "name", "eth0",
       "netns", str(node_pid))  # fmt: skip
    ip(fabric_pid, "link", "set", fabric_end, "master", "fabric", "up")
    ip(node_pid, "addr", "add", address, "dev", "eth0")
    ip(node_pid, "link", "set", "eth0", "up")


def make_fabric_bridge(fabric_pid: int) -> None:
    ip(fabric_pid, "link", "set", "lo", "up")
    ip(fabric_pid, "link", "add", "fabric", "type", "bridge")
    ip(fabric_pid, "link", "set", "fabric", "up")


class Forwarder:
    """127.0.0.1:<port> inside a node's network namespace relayed to the host's; `cut` a
    port and the node finds nothing listening there (until `restore`)."""

    def __init__(self, node_pid: int, ports: list[int]) -> None:
        self.node_pid = node_pid
        self.servers: dict[int, socket.socket] = {}
        self.open: dict[int, list[socket.socket]] = {port: [] for port in ports}
        self.closed = threading.Event()
        for port in ports:
            self.restore(port)

    def restore(self, port: int) -> None:
        with in_netns(self.node_pid):
            server = socket.create_server(("127.0.0.1", port))
        self.servers[port] = server
        threading.Thread(target=self._accept, args=(server, port), daemon=True).start()

    def cut(self, port: int) -> None:
        """The port closed inside the node, and every connection through it dropped."""
        server = self.servers.pop(port)
        _close(server)
        for sock in self.open[port]:
            _close(sock)
        self.open[port].clear()

    def _accept(self, server: socket.socket, port: int) -> None:
        while not self.closed.is_set():
            try:
                inside, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(inside, port), daemon=True).start()

    def _relay(self, inside: socket.socket, port: int) -> None:
        try:
            outside = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            inside.close()
            return
        outside.settimeout(None)
        pair = {inside: outside, outside: inside}
        self.open[port] += [inside, outside]
        try:
            while not self.closed.is_set():
                ready, _, _ = select.select(list(pair), [], [], 1.0)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for sock in pair:
                _close(sock)
                with contextlib.suppress(ValueError):
                    self.open[port].remove(sock)

    def close(self) -> None:
        self.closed.set()
        for port in list(self.servers):
            self.cut(port)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def netns_inode(pid: int) -> int:
    return Path(f"/proc/{pid}/ns/net").stat().st_ino
