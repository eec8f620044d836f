"""The Grafana dashboard in deploy/: well-formed, about real metrics, shipped by the chart."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from django.test import Client

from tests.observability.exposition import (
    DASHBOARD,
    RULE_TESTS,
    families,
    metric_names,
    sample_names,
    scrape,
)


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # panels of a collapsed row
    return found


def expressions(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(board) for t in p.get("targets", [])]


def test_the_dashboard_is_grafana_json_with_a_datasource_variable():
    board = dashboard()
    assert board["uid"] == "domain-portal" and board["title"]
    assert isinstance(board["schemaVersion"], int)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
    # every variable an expression uses is defined
    used = {v for e in expressions(board) for v in re.findall(r"\$(\w+)", e)}
    assert used <= set(variables) | {"__rate_interval", "__interval", "__range"}


def test_the_dashboard_covers_fleet_formation_quotas_and_agents():
    board = dashboard()
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == [
        "Fleet",
        "Formation latency",
        "Quotas and channels",
        "Agents",
        "Domains and GPUs",
    ]
    used = set().union(*(metric_names(e) for e in expressions(board)))
    assert {
        "portal_domains",
        "portal_domain_formation_seconds_bucket",
        "portal_domain_formation_step_seconds_bucket",
        "portal_quota_used",
        "portal_quota_limit",
        "portal_node_heartbeat_age_seconds",
        "portal_agents",
        "portal_gpu_info",
        "portal_tray_info",
        "portal_tray_condition",
    } <= used


@pytest.mark.django_db
def test_every_expression_reads_metrics_that_metrics_exposes(operator, ns_a, topology):
    client = Client()
    client.force_login(operator)
    exposed = sample_names(families(scrape(client)))
    for expr in expressions(dashboard()):
        used = metric_names(expr)
        assert used, expr
        assert used <= exposed, f"{expr}: {used - exposed} not in /metrics"


def test_a_cluster_variable_filters_every_series_of_the_portal():
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    cluster = variables["cluster"]
    assert cluster["definition"] == "label_values(portal_build_info, cluster)"
    assert cluster["includeAll"] and cluster["allValue"] == ".*"  # matches no label at all
    assert 'cluster=~"$cluster"' in variables["namespace"]["definition"]
    for expr in expressions(board):
        selectors = re.findall(r"\b(?:portal_[a-z0-9_]+|DCGM_[A-Z0-9_]+)(\{[^}]*\})?", expr)
        assert selectors, expr
        assert all('cluster=~"$cluster"' in s for s in selectors), expr


def test_the_gpu_utilisation_panel_is_the_dcgm_join_that_promtool_tests():
    """The panel's expression, its variables set to All, is the one alerts_test.yaml
    evaluates against DCGM's and the portal's series from two web pods."""
    (panel,) = [p for p in panels(dashboard()) if p["title"] == "GPU utilisation per domain (DCGM)"]
    (target,) = panel["targets"]
    tested = [
        case["expr"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("promql_expr_test", [])
    ]

    def normal(expr: str) -> str:
        return " ".join(expr.replace("( ", "(").replace(" )", ")").split())

    as_all = target["expr"].replace("$cluster", ".*").replace("$namespace", ".*")
    assert normal(as_all) in {normal(e) for e in tested}
    assert "on (UUID) group_left (domain, tenant_namespace)" in target["expr"]
