"""The alerting rules in deploy/: valid for Prometheus, unit-tested, and about real metrics."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from django.test import Client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.metrics import REGISTRY
from tests.observability.exposition import (
    ALERTS,
    PROMTOOL,
    ROOT,
    RULE_TESTS,
    agent_metric_names,
    families,
    metric_names,
    needs_promtool,
    sample_names,
    scrape,
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=RULE_TESTS.parent
    )


@needs_promtool
def test_promtool_checks_the_rules():
    result = promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 12 rules found" in result.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass():
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_unit_tested_and_firing():
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {r["alert"] for r in rules} == fired
    for rule in rules:
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@pytest.mark.django_db
def test_the_rules_read_only_metrics_that_metrics_exposes(operator, ns_a, topology):
    client = Client()
    client.force_login(operator)
    exposed = sample_names(families(scrape(client)))
    agent_exposed = sample_names(
        {f.name: f for f in text_string_to_metric_families(generate_latest(REGISTRY).decode())}
    )
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            used = metric_names(rule["expr"])
            agents = agent_metric_names(rule["expr"])
            # PortalDown reads Prometheus' own `up` of the scrape: /metrics is what is missing
            assert used or agents or re.search(r"\bup\{job=", rule["expr"]), rule["alert"]
            assert used <= exposed, f"{rule['alert']}: {used - exposed} not in /metrics"
            assert agents <= agent_exposed, f"{rule['alert']}: {agents} not in an agent's"


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def test_every_alert_links_its_own_runbook_page():
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/runbooks/{rule['alert']}.md", rule["alert"]
        page = (ROOT / url).read_text()
        assert page.startswith(f"# {rule['alert']}\n"), url
        for section in ("## What it means", "## How to check", "## What to do"):
            assert section in page, (url, section)
    pages = {p.stem for p in (ROOT / "docs/runbooks").glob("*.md")} - {"README"}
    assert pages == {r["alert"] for r in rules()}  # no page for an alert that is gone


def test_a_tenant_is_never_labelled_namespace_which_the_scrape_owns():
    for rule in rules():
        by = re.findall(r"by \(([^)]*)\)", rule["expr"])
        labels = {label.strip() for group in by for label in group.split(",")}
        assert "namespace" not in labels or rule["alert"] == "PortalDown", rule["alert"]
        assert "$labels.namespace" not in str(rule["annotations"]), rule["alert"]
