# SPDX-License-Identifier: Apache-2.0
"""Liveness, readiness and metrics over HTTP for the Helm DaemonSet (`--health-addr`).

`/healthz`: every hosted loop has cycled recently. `/readyz`: every tray has joined and its
last report reached the portal. Both return JSON describing each tray. `/metrics`: the
agent's own figures (`nodeagent.metrics`), in the text format or OpenMetrics, whichever the
scraper asks for.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import choose_encoder

from nodeagent.metrics import REGISTRY


def parse_addr(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--health-addr must be HOST:PORT, got {value!r}")
    return host, int(port)


class HealthServer:
    def __init__(self, addr: str, probe: Callable[[], list[dict[str, Any]]]) -> None:
        host, port = parse_addr(addr)
        self.probe = probe
        handler = self._handler()
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        probe = self.probe

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                    self.answer(200, content_type, encoder(REGISTRY))
                    return
                key = {"/healthz": "alive", "/readyz": "ready"}.get(self.path)
                if key is None:
                    self.send_error(404)
                    return
                trays = probe()
                ok = bool(trays) and all(t[key] for t in trays)
                body = json.dumps({"ok": ok, "trays": trays}).encode()
                self.answer(200 if ok else 503, "application/json", body)

            def answer(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
