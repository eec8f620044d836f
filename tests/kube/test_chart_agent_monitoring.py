"""The chart's PodMonitor for the node agents' own /metrics."""

from __future__ import annotations

import pytest

helm = pytest.importorskip("helm_python.chart", reason="helm-python-sdk (helm template) absent")

from tests.kube.test_chart import VALUES, render  # noqa: E402  (needs helm, above)


def objects(**values: object) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render({**VALUES, **values})}


def test_no_pod_monitor_unless_asked_for():
    assert not [k for k in objects() if k[0] == "PodMonitor"]


def test_the_pod_monitor_scrapes_each_agent_on_its_health_port_naming_its_node():
    found = objects(monitoring={"podMonitor": {"enabled": True, "labels": {"release": "kps"}}})
    monitor = found["PodMonitor", "portal-domain-portal-agent"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    agent = found["DaemonSet", "portal-domain-portal-agent"]
    pod = agent["spec"]["template"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert selector["app.kubernetes.io/component"] == "agent"  # not the runner's pods
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-portal"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "agent"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert endpoint["port"] == "health"
    assert f"--health-addr=0.0.0.0:{ports['health']}" in container["args"]
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")
    assert endpoint["relabelings"] == [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "node",
        },
        {"action": "replace", "targetLabel": "job", "replacement": "domain-portal-agent"},
    ]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "10s")


def test_no_pod_monitor_without_agents():
    found = objects(agent={"enabled": False}, monitoring={"podMonitor": {"enabled": True}})
    assert not [k for k in found if k[0] == "PodMonitor"]


def test_a_typo_in_the_pod_monitor_values_is_refused_naming_the_field():
    with pytest.raises(Exception, match="/monitoring/podMonitor"):
        objects(monitoring={"podMonitor": {"enable": True}})
