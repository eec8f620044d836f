"""The agent's /metrics: what a reconcile, a prepare and the IMEX runner's version look like
to Prometheus, served by the same HTTP server as the health probes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from nodeagent import metrics
from nodeagent.client import PortalError
from nodeagent.config import AGENT_VERSION, Paths
from nodeagent.dra.server import ClaimRef, MeteredDriver, PreparedDevice, PrepareResult
from nodeagent.files import write_atomic
from nodeagent.health import HealthServer
from nodeagent.imex.runnerfiles import running_version, status_path
from testbed.processes import wait_until
from tests.nodeagent.test_runner import start_runner
from tests.observability.exposition import PROMTOOL, needs_promtool


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "tray")


@pytest.fixture
def runner(paths: Paths) -> Iterator[None]:
    """A real IMEX runner process on the tray's root (its daemon: a stand-in sleeper)."""
    proc = start_runner(paths)
    yield
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def server() -> Iterator[HealthServer]:
    health = HealthServer("127.0.0.1:0", lambda: [{"alive": True, "ready": True}])
    health.start()
    yield health
    health.stop()


def scrape(server: HealthServer) -> dict[str, float]:
    """Every sample as `name{k="v",…}` → value."""
    response = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            found[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return found


class Kubelet:
    """The claims a prepare gets, and the answers it gives: one good, one refused."""

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        time.sleep(0.02)
        device = PreparedDevice(["channel"], "tray", "channel-1", ["k8s.example/x=1"])
        return {
            c.uid: PrepareResult(devices=[device])
            if c.name == "good"
            else PrepareResult(error="the IMEX daemon is not ready yet")
            for c in claims
        }

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        return {c.uid: "" for c in claims}


def test_the_health_server_serves_the_agents_metrics_next_to_its_probes(server):
    assert httpx.get(f"http://127.0.0.1:{server.port}/healthz").json()["ok"] is True
    found = scrape(server)
    assert found[f'nodeagent_build_info{{version="{AGENT_VERSION}"}}'] == 1
    assert "nodeagent_reconcile_seconds_count" in found
    assert "nodeagent_daemon_restarts_total" in found
    assert "nodeagent_dra_prepare_seconds_count" in found
    assert "nodeagent_dra_prepare_errors_total" in found
    openmetrics = httpx.get(
        f"http://127.0.0.1:{server.port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    kinds = {f.name: f.type for f in openmetrics_families(openmetrics.text)}
    assert kinds["nodeagent_reconcile_seconds"] == "histogram"
    assert kinds["nodeagent_runner_version_skew"] == "gauge"


@needs_promtool
def test_promtool_check_metrics_reports_nothing(server):
    metrics.observed({"daemon_state": "READY", "domain_state": "UP"})
    text = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_a_cycle_is_timed_and_a_failed_one_counted_by_its_kind(server):
    before = scrape(server)

    def fails() -> float:
        raise PortalError("portal away")

    assert metrics.timed(lambda: 1.5) == 1.5
    with pytest.raises(PortalError):
        metrics.timed(fails)
    after = scrape(server)
    count = "nodeagent_reconcile_seconds_count"
    assert after[count] - before[count] == 2
    errors = 'nodeagent_reconcile_errors_total{error="PortalError"}'
    assert after[errors] - before.get(errors, 0) == 1


def test_the_imex_states_a_cycle_observed_are_one_series_each(server):
    metrics.observed({"daemon_state": "READY", "domain_state": "UP"})
    found = scrape(server)
    assert found['nodeagent_imex_daemon_state{state="READY"}'] == 1
    assert found['nodeagent_imex_domain_state{state="UP"}'] == 1
    metrics.observed({"daemon_state": "", "domain_state": ""})
    found = scrape(server)
    assert found['nodeagent_imex_daemon_state{state="NONE"}'] == 1
    assert 'nodeagent_imex_daemon_state{state="READY"}' not in found


def test_a_prepare_is_timed_and_its_refused_claims_counted(server):
    before = scrape(server)
    driver = MeteredDriver(Kubelet())
    answers = driver.prepare([ClaimRef("team-a", "u1", "good"), ClaimRef("team-a", "u2", "early")])
    assert answers["u1"].devices and answers["u2"].error  # passed through unchanged
    after = scrape(server)
    assert (
        after["nodeagent_dra_prepare_seconds_count"] - before["nodeagent_dra_prepare_seconds_count"]
        == 1
    )
    assert (
        after["nodeagent_dra_prepare_seconds_sum"] - before["nodeagent_dra_prepare_seconds_sum"]
        >= 0.02
    )
    errors = "nodeagent_dra_prepare_errors_total"
    assert after[errors] - before[errors] == 1


def test_a_runner_of_this_release_says_its_version_and_raises_no_condition(
    paths,
    runner,
    server,
):
    wait_until(lambda: status_path(paths).exists(), timeout=10, what="the runner's status")
    status = json.loads(status_path(paths).read_text())
    assert status["version"] == AGENT_VERSION
    assert metrics.runner_condition(running_version(status_path(paths))) is None
    found = scrape(server)
    assert found[f'nodeagent_runner_info{{version="{AGENT_VERSION}"}}'] == 1
    assert found["nodeagent_runner_version_skew"] == 0


def test_an_older_runner_kept_by_on_delete_is_a_condition_and_a_metric(paths, server):
    # What a runner from before this release writes: no version in its status.
    old = {"instance": 3, "pid": 4242, "running": True, "exit_code": None, "starts": 3}
    write_atomic(status_path(paths), json.dumps(old | {"updated_at": time.time()}))
    condition = metrics.runner_condition(running_version(status_path(paths)))
    assert condition is not None
    assert (condition["type"], condition["blocking"]) == ("RunnerVersionSkew", False)
    assert AGENT_VERSION in condition["message"] and "drain" in condition["message"]
    found = scrape(server)
    assert found['nodeagent_runner_info{version=""}'] == 1
    assert found["nodeagent_runner_version_skew"] == 1

    write_atomic(status_path(paths), json.dumps(old | {"version": "0.0.1", "updated_at": 0}))
    assert (
        metrics.runner_condition(running_version(status_path(paths))) is None
    )  # stale: no runner running
    assert scrape(server)["nodeagent_runner_version_skew"] == 0
