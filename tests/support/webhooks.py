"""A webhook receiver on loopback for the notification tests: a real HTTP server that
records every request and answers from a script (then 200)."""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Hooks(ThreadingHTTPServer):
    """A webhook receiver: records every request; answers from `script`, then 200."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.script: dict[str, list[int]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def on(self, path: str) -> list[tuple[dict[str, str], bytes]]:
        return [(h, b) for p, h, b in self.received if p == path]


class _Handler(BaseHTTPRequestHandler):
    server: Hooks

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append((self.path, dict(self.headers.items()), body))
        codes = self.server.script.get(self.path) or [200]
        code = codes.pop(0) if len(codes) > 1 else codes[0]
        self.send_response(code)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class Tarpit:
    """A webhook target that accepts every connection and never answers, until `release`
    (then 200 to each held one): a tenant's receiver that holds whoever delivers to it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.held: list[socket.socket] = []
        self.accepted = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="tarpit", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.held.append(conn)
                self.accepted += 1

    def holding(self) -> int:
        """Connections held open right now (those whose client has not given up)."""
        with self._lock:
            alive = []
            for conn in self.held:
                if self._gone(conn):
                    conn.close()
                else:
                    alive.append(conn)
            self.held = alive
            return len(alive)

    @staticmethod
    def _gone(conn: socket.socket) -> bool:
        """Whether the client closed it (what it sent is read and dropped)."""
        conn.setblocking(False)
        try:
            while chunk := conn.recv(65536):
                del chunk
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    def release(self) -> None:
        """Answer every held connection 200 and close it."""
        with self._lock:
            for conn in self.held:
                with contextlib.suppress(OSError):
                    conn.setblocking(True)
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    conn.close()
            self.held = []

    def close(self) -> None:
        self.release()
        self.listener.close()
