"""A real Prometheus scrapes a production web process (DEBUG off, HTTPS redirect on) the way
the chart's ServiceMonitor makes the Prometheus Operator scrape it: plain HTTP to the pod,
the metrics token, honor_labels, the Kubernetes target labels (the portal's own
`namespace`, `pod`, `service`) and job `domain-portal`. Two tenants' degraded domains stay
two alerts, and stopping the web sets off PortalDown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from domains.computedomains.models import ComputeDomain, Phase
from testbed import factories
from testbed.agents import wait_for
from testbed.processes import Proc, running, start_server
from tests.observability.conftest import METRICS_TOKEN, production_env
from tests.observability.exposition import ALERTS
from tests.support.prometheus import PROMETHEUS, Prometheus, running_prometheus

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus absent (apt-get install prometheus)"),
]

PORTAL_NAMESPACE = "gpu-portal"


def service_monitor_job(target: str, token_file: Path) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates from the chart's ServiceMonitor, with
    the target's Kubernetes metadata given as a static target's labels."""
    meta = {
        "__meta_kubernetes_namespace": PORTAL_NAMESPACE,
        "__meta_kubernetes_service_name": "portal-domain-portal-web",
        "__meta_kubernetes_pod_name": "portal-domain-portal-web-5d9c7-abcde",
        "__meta_kubernetes_pod_container_name": "web",
    }
    copy = [
        ("__meta_kubernetes_namespace", "namespace"),
        ("__meta_kubernetes_service_name", "service"),
        ("__meta_kubernetes_pod_name", "pod"),
        ("__meta_kubernetes_pod_container_name", "container"),
        ("__meta_kubernetes_service_name", "job"),
    ]
    return {
        "job_name": f"serviceMonitor/{PORTAL_NAMESPACE}/portal-domain-portal/0",
        "honor_labels": True,
        "scheme": "http",
        "metrics_path": "/metrics",
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "static_configs": [{"targets": [target], "labels": meta}],
        "relabel_configs": [
            *({"source_labels": [src], "target_label": dst} for src, dst in copy),
            {"target_label": "endpoint", "replacement": "http"},
            # the chart's endpoint relabelling (tests/kube/test_chart_monitoring.py)
            {"action": "replace", "target_label": "job", "replacement": "domain-portal"},
        ],
    }


@pytest.fixture
def web(transactional_db, static_root) -> Iterator[Proc]:
    proc, url = start_server(**production_env(static_root))
    proc.url = url  # type: ignore[attr-defined]
    with running(proc):
        yield proc


@pytest.fixture
def prometheus(web, tmp_path: Path) -> Iterator[Prometheus]:
    token = tmp_path / "metrics-token"
    token.write_text(METRICS_TOKEN)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [service_monitor_job(web.url.removeprefix("http://"), token)],
    }
    with running_prometheus(config, tmp_path) as server:
        yield server


def degraded(namespace: str, count: int) -> None:
    ns = factories.make_namespace(namespace)
    for i in range(count):
        ComputeDomain.objects.create(
            namespace=ns,
            name=f"degraded-{i}",
            num_nodes=2,
            resource_claim_template=f"degraded-{i}-channel",
            phase=Phase.DEGRADED,
        )


def test_a_production_portal_is_scraped_as_a_service_monitor_scrapes_it(prometheus, web):
    degraded("team-a", 1)
    degraded("team-b", 2)
    up = wait_for(lambda: prometheus.query('up{job="domain-portal"} == 1'), 30, "target up")
    (target,) = prometheus.get("/targets")["activeTargets"]
    assert (target["health"], target["lastError"]) == ("up", "")  # no 301, no 400, no 401
    assert {k: up[0]["metric"][k] for k in ("namespace", "pod", "service", "job")} == {
        "namespace": PORTAL_NAMESPACE,
        "pod": "portal-domain-portal-web-5d9c7-abcde",
        "service": "portal-domain-portal-web",
        "job": "domain-portal",
    }
    # The tenant is its own label, next to the portal's namespace, on what was scraped.
    series = prometheus.query('portal_domains{phase="Degraded"} > 0')
    assert {(s["metric"]["tenant_namespace"], s["metric"]["namespace"]) for s in series} == {
        ("team-a", PORTAL_NAMESPACE),
        ("team-b", PORTAL_NAMESPACE),
    }
    assert not any("exported_namespace" in s["metric"] for s in series)

    # Three degraded domains in two tenants: three PortalDomainDegraded alerts (pending for
    # their 5 minutes), each naming its domain and tenant; both tenants have a "degraded-0".
    def three_pending() -> list[dict[str, str]]:
        found = prometheus.alerts("PortalDomainDegraded")
        return found if len(found) == 3 else []

    alerts = wait_for(three_pending, 30, "three PortalDomainDegraded alerts")
    assert sorted((a["tenant_namespace"], a["domain"]) for a in alerts) == [
        ("team-a", "degraded-0"),
        ("team-b", "degraded-0"),
        ("team-b", "degraded-1"),
    ]
    assert prometheus.alerts("PortalDown") == []

    web.stop()  # every web pod gone: the scrape fails, every portal series goes stale
    down = wait_for(lambda: prometheus.alerts("PortalDown"), 30, "PortalDown pending")
    assert down == [
        {"alertname": "PortalDown", "namespace": PORTAL_NAMESPACE, "severity": "critical"}
    ]
