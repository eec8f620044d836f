"""A webhook receiver on loopback for the notification tests: a real HTTP server that
records every request and answers from a script (then 200)."""

from __future__ import annotations

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
