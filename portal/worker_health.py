"""Liveness and readiness for Celery workers, over HTTP for Kubernetes probes.

Set PORTAL_WORKER_HEALTH_ADDR=host:port and the worker serves:

- ``/healthz`` — alive: the worker's timer thread stamped a beat recently. A worker whose
  process is wedged stops stamping, and the kubelet restarts it.
- ``/readyz`` — ready for work: connected to the broker and the database answers.

Every beat also stamps the cache, with or without the endpoints: the portal's health
condition (domains/health/workers.py) reads it to say whether any worker is running.

A bootstep rather than ``celery inspect ping`` as an exec probe: the probe costs one HTTP
request instead of starting a Python interpreter and a broadcast round-trip every period.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from celery import bootsteps
from django.db import connection

from domains.health.workers import worker_seen

logger = logging.getLogger(__name__)

BEAT_EVERY_S = 5.0
STALE_AFTER_S = 30.0


class WorkerHealth(bootsteps.StartStopStep):
    """Stamps a beat from the worker's timer and serves the probes."""

    requires = ("celery.worker.components:Timer",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.addr = os.environ.get("PORTAL_WORKER_HEALTH_ADDR", "")
        self.last_beat = time.monotonic()
        self.server: ThreadingHTTPServer | None = None
        self.hostname = "worker"
        self._tref: Any = None

    def start(self, worker: Any) -> None:
        self.hostname = str(getattr(worker, "hostname", "") or "worker")
        self._tref = worker.timer.call_repeatedly(BEAT_EVERY_S, self._beat)
        self._beat()
        if not self.addr:
            return
        host, _, port = self.addr.rpartition(":")
        self.server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), _handler(self, worker))
        threading.Thread(target=self.server.serve_forever, name="health", daemon=True).start()
        logger.info("worker health endpoints on http://%s/healthz and /readyz", self.addr)

    def stop(self, worker: Any) -> None:
        if self._tref is not None:
            self._tref.cancel()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def _beat(self) -> None:
        self.last_beat = time.monotonic()
        # The portal's health condition reads it; Redis away, the condition says so itself.
        with contextlib.suppress(Exception):
            worker_seen(self.hostname)

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        age = time.monotonic() - self.last_beat
        return age < STALE_AFTER_S, {"beat_age_s": round(age, 1)}

    def readiness(self, worker: Any) -> tuple[bool, dict[str, str]]:
        checks = {"broker": "ok" if _broker_connected(worker) else "disconnected"}
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            checks["database"] = "ok"
        except Exception as exc:  # any failure means "not ready", never a crash
            checks["database"] = f"error: {exc.__class__.__name__}"
        finally:
            connection.close()  # probes run on their own threads: don't leak a connection
        return all(v == "ok" for v in checks.values()), checks


def _broker_connected(worker: Any) -> bool:
    consumer = getattr(worker, "consumer", None)
    conn = getattr(consumer, "connection", None)
    return bool(conn is not None and conn.connected)


def _handler(step: WorkerHealth, worker: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok, body = step.liveness()
            elif self.path == "/readyz":
                ok, body = step.readiness(worker)
            else:
                self.send_error(404)
                return
            payload = json.dumps({"status": "ok" if ok else "unavailable", "checks": body})
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload.encode())

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds would drown the worker log

    return Handler
