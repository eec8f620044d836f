"""Reading /metrics as Prometheus would, and the metric names PromQL expressions use."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy/helm/domain-portal/monitoring"
ALERTS = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "dashboard.json"
RULE_TESTS = Path(__file__).resolve().parent / "alerts_test.yaml"

# Debian's `prometheus` package (.ci/run installs it when missing).
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool absent (apt-get install prometheus)"
)


def scrape(client: Client, **headers: str) -> str:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    return response.content.decode()


def families(text: str) -> dict[str, Metric]:
    """Families by name, as Prometheus' text parser groups them; a name twice is an error."""
    found: dict[str, Metric] = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in found, f"{family.name} is split into two groups"
        found[family.name] = family
    return found


def value(found: dict[str, Metric], sample: str, **labels: str) -> float:
    """The value of one sample, e.g. value(f, "portal_nodes", state="ready")."""
    family = found.get(sample) or found[re.sub(r"_(bucket|sum|count|total)$", "", sample)]
    matches = [s.value for s in family.samples if s.name == sample and s.labels == labels]
    assert len(matches) == 1, f"{sample}{labels}: {len(matches)} samples in {family.samples}"
    return matches[0]


def sample_names(found: dict[str, Metric]) -> set[str]:
    """Every series name a query can use, whether or not the family has samples right now."""
    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",)}
    names = set()
    for name, family in found.items():
        names |= {name + s for s in suffixes.get(family.type, ("",))}
    return names


def metric_names(expr: str) -> set[str]:
    """The portal's metric names an expression reads (all of ours start with `portal_`)."""
    return set(re.findall(r"\bportal_[a-z0-9_]+", expr))


def agent_metric_names(expr: str) -> set[str]:
    """The node agent's metric names an expression reads (`nodeagent_`)."""
    return set(re.findall(r"\bnodeagent_[a-z0-9_]+", expr))
