"""The node agent's /metrics and the IMEX runner's version, with real agent and runner
processes per tray against a real server and worker, scraped the way Prometheus scrapes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from domains.computedomains.models import Phase
from domains.inventory.models import Node, NodeCondition
from nodeagent.config import AGENT_VERSION
from nodeagent.files import write_atomic
from nodeagent.runner import status_path
from testbed import factories
from testbed.agents import wait_for
from testbed.trays import Tray, facts_of, trays_of
from tests.e2e.conftest import METRICS_TOKEN, phase_of, request_domain
from tests.observability.test_prometheus_scrape import service_monitor_job
from tests.support.prometheus import PROMETHEUS, running_prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(8)  # this module's loopback range


@pytest.fixture
def nodes(transactional_db) -> list[Node]:
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    return list(Node.objects.filter(rack=rack).order_by("slot"))


def samples(url: str, **headers: str) -> dict[str, float]:
    """`name{k="v",…}` → value for every sample a /metrics answers."""
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=10).text
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            found[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return found


def agent_metrics(tray: Tray) -> dict[str, float]:
    return samples(f"http://127.0.0.1:{tray.health_port}")


def test_a_trays_agent_reports_its_reconciles_imex_state_runner_and_restarts(
    portal, tenant_api, nodes, tmp_path
):
    with trays_of(portal, nodes, tmp_path, runner=True) as trays:
        domain = request_domain(tenant_api, "watched", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        victim, peer = trays
        ready = 'nodeagent_imex_daemon_state{state="READY"}'
        wait_for(lambda: agent_metrics(victim).get(ready) == 1, 30, "READY in the metrics")
        found = agent_metrics(victim)
        assert found['nodeagent_imex_domain_state{state="UP"}'] == 1
        assert found["nodeagent_reconcile_seconds_count"] >= 3
        assert found[f'nodeagent_build_info{{version="{AGENT_VERSION}"}}'] == 1
        assert found[f'nodeagent_runner_info{{version="{AGENT_VERSION}"}}'] == 1
        assert found["nodeagent_runner_version_skew"] == 0
        assert found["nodeagent_daemon_restarts_total"] == 0

        # The portal's side names the trays of the domain.
        portal_side = samples(portal, Authorization=f"Bearer {METRICS_TOKEN}")
        for node in nodes:
            key = (
                f'portal_tray_info{{clique="{node.clique.label}",domain="watched",'
                f'member_state="ready",node="{node.hostname}",rack="{node.rack.name}",'
                f'slot="{node.slot}",state="ready",tenant_namespace="e2e"}}'
            )
            assert portal_side.get(key) == 1, sorted(k for k in portal_side if "tray_info" in k)

        os.kill(victim.daemon_pid() or 0, signal.SIGKILL)  # nvidia-imex dies under the runner
        restarts = "nodeagent_daemon_restarts_total"
        wait_for(lambda: agent_metrics(victim)[restarts] == 1, 30, "the restart counted")
        wait_for(lambda: agent_metrics(victim).get(ready) == 1, 30, "READY again")
        assert agent_metrics(peer)[restarts] == 0


@contextlib.contextmanager
def old_runner(status_file: Path) -> Iterator[None]:
    """A runner from before this release, as its status file shows it: no version. (Its
    daemon is not needed: the tray serves no domain.)"""
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            doc = {"instance": 0, "pid": None, "running": False, "exit_code": None, "starts": 0}
            write_atomic(status_file, json.dumps(doc | {"updated_at": time.time()}))
            stop.wait(1)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def test_an_older_runner_is_a_tray_condition_in_the_portal_and_a_metric(portal, nodes, tmp_path):
    node = nodes[0]
    tray = Tray(portal, facts_of(node), root=tmp_path / node.hostname, args=("--imex-runner",))
    with old_runner(status_path(tray.paths)), tray:
        tray.wait_ready()
        condition = wait_for(
            lambda: NodeCondition.objects.filter(node=node, type="RunnerVersionSkew").first(),
            30,
            "the condition in the portal",
        )
        assert not condition.blocking  # an old runner still runs nvidia-imex
        assert AGENT_VERSION in condition.message
        assert agent_metrics(tray)["nodeagent_runner_version_skew"] == 1
        portal_side = samples(portal, Authorization=f"Bearer {METRICS_TOKEN}")
        labels = f'blocking="false",node="{node.hostname}",type="RunnerVersionSkew"'
        assert portal_side[f"portal_tray_condition{{{labels}}}"] == 1


def pod_monitor_job(trays: list[Tray]) -> dict:
    """The scrape job the Prometheus Operator makes of the chart's PodMonitor (its relabelling
    is pinned by tests/kube/test_chart_agent_monitoring.py), each agent a static target
    carrying its pod's Kubernetes metadata."""
    return {
        "job_name": "podMonitor/gpu-portal/portal-domain-portal-agent/0",
        "scheme": "http",
        "metrics_path": "/metrics",
        "static_configs": [
            {
                "targets": [f"127.0.0.1:{tray.health_port}"],
                "labels": {
                    "__meta_kubernetes_namespace": "gpu-portal",
                    "__meta_kubernetes_pod_name": f"portal-domain-portal-agent-{i}",
                    "__meta_kubernetes_pod_node_name": tray.hostname,
                },
            }
            for i, tray in enumerate(trays)
        ],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            # the chart's podMetricsEndpoints relabelings
            {
                "action": "replace",
                "source_labels": ["__meta_kubernetes_pod_node_name"],
                "target_label": "node",
            },
            {"action": "replace", "target_label": "job", "replacement": "domain-portal-agent"},
        ],
    }


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus absent (apt-get install prometheus)")
def test_prometheus_joins_each_agents_figures_with_the_domain_its_tray_serves(
    portal, tenant_api, nodes, tmp_path
):
    with trays_of(portal, nodes, tmp_path, runner=True) as trays:
        domain = request_domain(tenant_api, "joined", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        token = tmp_path / "metrics-token"
        token.write_text(METRICS_TOKEN)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                service_monitor_job(portal.removeprefix("http://"), token),
                pod_monitor_job(trays),
            ],
        }
        (tmp_path / "prometheus").mkdir()
        with running_prometheus(config, tmp_path / "prometheus") as prometheus:
            join = (
                'nodeagent_imex_daemon_state{job="domain-portal-agent", state="READY"}'
                " * on (node) group_left (domain, tenant_namespace)"
                ' max by (node, domain, tenant_namespace) (portal_tray_info{domain!=""})'
            )

            def joined() -> list[dict]:
                found = prometheus.query(join)
                return found if len(found) == 2 else []

            series = wait_for(joined, 30, "both trays' agents joined with their domain")
            assert {(s["metric"]["node"], s["metric"]["domain"]) for s in series} == {
                (n.hostname, "joined") for n in nodes
            }
            assert {s["metric"]["tenant_namespace"] for s in series} == {"e2e"}
