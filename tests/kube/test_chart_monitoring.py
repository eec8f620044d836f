"""What the chart ships for monitoring: the Grafana dashboard ConfigMap for the sidecar, the
alerting rules as a PrometheusRule, and the metrics token for the web."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.kube.schemas import assert_valid_kubernetes
from tests.observability.exposition import ALERTS, DASHBOARD, PROMTOOL

helm = pytest.importorskip("helm_python.chart", reason="helm-python-sdk (helm template) absent")

from tests.kube.test_chart import CHART, VALUES, render  # noqa: E402  (needs helm, above)


def objects(**values: object) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render({**VALUES, **values})}


def test_the_dashboard_ships_in_a_configmap_the_grafana_sidecar_picks_up():
    cm = objects()["ConfigMap", "portal-domain-portal-dashboard"]
    assert_valid_kubernetes(cm)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "gpu-portal"
    assert json.loads(cm["data"]["domain-portal.json"]) == json.loads(DASHBOARD.read_text())


def test_the_sidecar_label_namespace_and_folder_are_configurable():
    dashboard = {
        "labelName": "example.com/dashboard",
        "labelValue": "gpu",
        "namespace": "monitoring",
        "annotations": {"grafana_folder": "GPU fabric"},
    }
    cm = objects(monitoring={"grafanaDashboard": dashboard})[
        "ConfigMap", "portal-domain-portal-dashboard"
    ]
    assert cm["metadata"]["labels"]["example.com/dashboard"] == "gpu"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU fabric"}
    off = objects(monitoring={"grafanaDashboard": {"enabled": False}})
    assert ("ConfigMap", "portal-domain-portal-dashboard") not in off


def test_a_bad_sidecar_label_is_refused_naming_the_field():
    with pytest.raises(Exception, match="/monitoring/grafanaDashboard/labelName"):
        objects(monitoring={"grafanaDashboard": {"labelName": "not a label!"}})


def test_the_prometheus_rule_carries_the_rule_file_when_enabled(tmp_path: Path):
    assert not [k for k in objects() if k[0] == "PrometheusRule"]
    rule = objects(monitoring={"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}})[
        "PrometheusRule", "portal-domain-portal"
    ]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    if PROMTOOL:  # what the operator hands Prometheus is a valid rule file
        rendered = tmp_path / "rules.yaml"
        rendered.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        result = subprocess.run(
            [PROMTOOL, "check", "rules", str(rendered)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_metrics_token_reaches_only_the_web():
    found = objects(metricsToken="scrape-me")
    assert (
        found["Secret", "portal-domain-portal"]["stringData"]["PORTAL_METRICS_TOKEN"] == "scrape-me"
    )

    def env(name: str) -> dict[str, dict]:
        spec = found["Deployment", name]["spec"]["template"]["spec"]
        return {e["name"]: e for e in spec["containers"][0].get("env", [])}

    ref = env("portal-domain-portal-web")["PORTAL_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "portal-domain-portal", "key": "PORTAL_METRICS_TOKEN", "optional": True}
    assert "PORTAL_METRICS_TOKEN" not in env("portal-domain-portal-worker")
    assert "PORTAL_METRICS_TOKEN" not in objects()["Secret", "portal-domain-portal"]["stringData"]


def test_helm_lint_passes_with_monitoring_enabled():
    values = {**VALUES, "monitoring": {"prometheusRule": {"enabled": True}}, "metricsToken": "t"}
    report = helm.lint(CHART, values, strict=True, kube_version="v1.34.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_no_service_monitor_unless_asked():
    assert not [k for k in objects() if k[0] == "ServiceMonitor"]


def test_the_service_monitor_scrapes_every_web_pod_keeping_the_portals_labels():
    found = objects(
        metricsToken="scrape-me",
        monitoring={"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
    )
    monitor = found["ServiceMonitor", "portal-domain-portal"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    service = found["Service", "portal-domain-portal-web"]
    # It selects the web Service (and only it), in the release's namespace, by its port name.
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert selector["app.kubernetes.io/component"] == "web"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-portal"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # Plain HTTP to the pod (the HTTPS redirect spares /metrics), with the metrics token.
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "portal-domain-portal", "key": "PORTAL_METRICS_TOKEN"},
    }
    assert "PORTAL_METRICS_TOKEN" in found["Secret", "portal-domain-portal"]["stringData"]
    # The portal's labels win, and the job is the one the alerts read.
    assert endpoint["honorLabels"] is True
    assert endpoint["relabelings"] == [
        {"action": "replace", "targetLabel": "job", "replacement": "domain-portal"}
    ]
    assert 'up{job="domain-portal"}' in ALERTS.read_text()
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "10s")


def test_a_service_monitor_without_a_metrics_token_is_refused_saying_so():
    with pytest.raises(Exception, match="metricsToken"):
        objects(monitoring={"serviceMonitor": {"enabled": True}})
    # with an existing Secret the token is its PORTAL_METRICS_TOKEN key
    found = {
        (o["kind"], o["metadata"]["name"]): o
        for o in render(
            {"existingSecret": "mine", "monitoring": {"serviceMonitor": {"enabled": True}}}
        )
    }
    (endpoint,) = found["ServiceMonitor", "portal-domain-portal"]["spec"]["endpoints"]
    assert endpoint["authorization"]["credentials"]["name"] == "mine"


def test_runbook_links_point_where_the_operator_publishes_the_runbooks():
    rule = objects(
        monitoring={
            "prometheusRule": {"enabled": True},
            "runbookBaseUrl": "https://git.example.com/gpu/portal/-/blob/v1/docs/runbooks/",
        }
    )["PrometheusRule", "portal-domain-portal"]
    urls = {
        r["alert"]: r["annotations"]["runbook_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
    }
    assert (
        urls["PortalDown"]
        == "https://git.example.com/gpu/portal/-/blob/v1/docs/runbooks/PortalDown.md"
    )
    assert all(url.endswith(f"/docs/runbooks/{alert}.md") for alert, url in urls.items())


def test_helm_lint_passes_with_the_service_monitor():
    values = {
        **VALUES,
        "metricsToken": "t",
        "monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    }
    report = helm.lint(CHART, values, strict=True, kube_version="v1.34.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
