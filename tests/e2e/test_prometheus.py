"""Debian's real Prometheus scrapes the running portal while real agents form a domain.

Prometheus runs on loopback with a temporary data directory, presents the metrics token the
server was started with (PORTAL_METRICS_TOKEN) and loads the alerting rules from deploy/.
What it reads back through its HTTP API is what an operator's Prometheus would see.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from domain_portal import __version__
from domains.computedomains.models import Phase
from domains.inventory.models import Node
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from tests.e2e.conftest import IP_PREFIX, METRICS_TOKEN, phase_of, request_domain
from tests.observability.exposition import ALERTS, DASHBOARD
from tests.support.prometheus import PROMETHEUS, Prometheus, running_prometheus

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus absent (apt-get install prometheus)"),
]

# Prometheus' own counters of samples it had to drop from a scrape.
SCRAPE_PROBLEMS = (
    "prometheus_target_scrapes_sample_duplicate_timestamp_total",
    "prometheus_target_scrapes_sample_out_of_order_total",
    "prometheus_target_scrapes_sample_out_of_bounds_total",
    "prometheus_target_scrapes_exemplar_out_of_order_total",
    "prometheus_target_scrapes_exceeded_sample_limit_total",
)


@pytest.fixture
def prometheus(portal: str, tmp_path: Path) -> Iterator[Prometheus]:
    token = tmp_path / "metrics-token"
    token.write_text(METRICS_TOKEN)
    config = {
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {
                "job_name": "domain-portal",
                "authorization": {"type": "Bearer", "credentials_file": str(token)},
                "static_configs": [{"targets": [portal.removeprefix("http://")]}],
            }
        ],
    }
    with running_prometheus(config, tmp_path) as server:
        yield server


def test_prometheus_scrapes_the_portal_and_counts_a_formation(portal, tenant_api, prometheus):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    with AgentFleet(portal, Node.objects.filter(rack=rack)) as fleet:
        fleet.wait_joined()
        # the agents' version, from their join facts, is the portal's
        assert set(Node.objects.filter(rack=rack).values_list("agent_version", flat=True)) == {
            __version__
        }
        wait_for(lambda: prometheus.scalar('up{job="domain-portal"}') == 1, 30, "target up")
        before = prometheus.scalar("portal_domain_formation_seconds_count")
        assert before == 0

        domain = request_domain(tenant_api, "scraped", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")

        wait_for(
            lambda: prometheus.scalar("portal_domain_formation_seconds_count") == 1,
            30,
            "Prometheus to count the formation",
        )
    tray_ready = 'portal_domain_formation_step_seconds_count{step="tray_ready"}'
    assert prometheus.scalar(tray_ready) == 2
    assert prometheus.scalar('portal_domain_formation_step_seconds_count{step="ready"}') == 1
    assert prometheus.scalar('portal_domain_formation_seconds_bucket{le="+Inf"}') == 1
    assert prometheus.scalar(f'portal_agents{{version="{__version__}"}}') == 4
    assert prometheus.scalar(f'portal_build_info{{version="{__version__}"}}') == 1

    (target,) = prometheus.get("/targets")["activeTargets"]
    assert (target["health"], target["lastError"]) == ("up", "")
    counters = prometheus.own_counters()
    assert {name: counters.get(name) for name in SCRAPE_PROBLEMS} == dict.fromkeys(
        SCRAPE_PROBLEMS, 0.0
    )
    assert prometheus.scalar('scrape_samples_scraped{job="domain-portal"}') > 100


def test_the_alert_rules_and_dashboard_queries_run_on_real_data(portal, tenant_api, prometheus):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    with AgentFleet(portal, Node.objects.filter(rack=rack)) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "queried", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        wait_for(
            lambda: prometheus.scalar("portal_domain_formation_seconds_count") == 1, 30, "scrape"
        )

    def evaluated() -> list[dict[str, Any]]:
        rules = [r for g in prometheus.get("/rules")["groups"] for r in g["rules"]]
        done = [r for r in rules if not r["lastEvaluation"].startswith("0001-")]
        return rules if rules and len(done) == len(rules) else []

    rules = wait_for(evaluated, 30, "every rule evaluated")
    assert len(rules) == 12
    assert [(r["name"], r["health"], r.get("lastError", "")) for r in rules] == [
        (r["name"], "ok", "") for r in rules
    ]

    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for expr in exprs:
        query = expr.replace("$window", "5m").replace("$namespace", ".*")
        query = query.replace("$cluster", ".*")
        prometheus.query(query)  # Prometheus parses and evaluates it, or the test fails
    assert prometheus.query('max by (tenant_namespace, phase) (portal_domains{phase="Ready"})')
