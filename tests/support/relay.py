"""A TCP relay in front of the portal, for tests in which the agents lose it while the test
itself (and the portal's own processes) still reach it.

    with Relay(portal_url) as relay:
        fleet = AgentFleet(relay.url, nodes)
        relay.cut()    # the portal is away for whoever uses relay.url: connection refused
        relay.heal()   # back, on the same port

`cut` closes the listening socket and every relayed connection (as a web process that
exits, or a load balancer with no backend left), so a new connection is refused and an
open one (the agents' websocket) ends; `heal` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit


class Relay:
    def __init__(self, target_url: str) -> None:
        target = urlsplit(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self.listener: socket.socket | None = None
        self.port = 0
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Relay:
        self.heal()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()

    def heal(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self.lock:
            listener, self.listener = self.listener, None
            conns, self.open = self.open, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                if self.listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self.open |= {client, upstream}
            ends = threading.Semaphore(0)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b, ends), daemon=True).start()
            threading.Thread(target=self._close, args=(client, upstream, ends), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, ends: threading.Semaphore) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
            ends.release()

    def _close(self, a: socket.socket, b: socket.socket, ends: threading.Semaphore) -> None:
        """Both directions done: the pair goes."""
        ends.acquire()
        ends.acquire()
        with self.lock:
            self.open -= {a, b}
        a.close()
        b.close()
