"""A real Prometheus server for tests: Debian's `prometheus`, on a free loopback port, with
the configuration a test gives it, and a small client for its HTTP API."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testbed.processes import Proc, free_port, wait_until

PROMETHEUS = shutil.which("prometheus")


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url
        self.api = httpx.Client(base_url=f"{url}/api/v1", timeout=10)

    def get(self, path: str, **params: str) -> Any:
        body = self.api.get(path, params=params).json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.get("/query", query=expr)["result"]

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def alerts(self, name: str) -> list[dict[str, str]]:
        return [
            a["labels"] for a in self.get("/alerts")["alerts"] if a["labels"]["alertname"] == name
        ]

    def own_counters(self) -> dict[str, float]:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


@contextmanager
def running_prometheus(config: dict[str, Any], workdir: Path) -> Iterator[Prometheus]:
    """Prometheus with `config` (prometheus.yml as a dict), its data under `workdir`."""
    assert PROMETHEUS is not None, "prometheus is not installed (apt-get install prometheus)"
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = Proc(
        "prometheus",
        [
            PROMETHEUS,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        {"PATH": "/usr/bin:/bin", "HOME": str(workdir)},
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"prometheus exited:\n{proc.log()[-3000:]}")
        try:
            return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, timeout=30, what="prometheus")
        yield Prometheus(url)
    finally:
        proc.stop()
