"""The chart's objects as Helm renders them, and the DRA objects a cluster test starts
from: the chart's DeviceClass and a tray's ResourceSlice as its agent publishes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from domains.agents.desired import desired_state_for
from domains.inventory.models import Node
from nodeagent.dra import DEVICE_CLASS
from nodeagent.dra.kubeapi import ResourceApi
from nodeagent.dra.slices import SliceFacts, SlicePublisher, scheduling, slice_name
from testbed.kube.cluster import Cluster, ClusterKube

CHART = Path(__file__).resolve().parents[2] / "deploy/helm/domain-portal"
RELEASE_NAMESPACE = "gpu-portal"


def chart_objects() -> dict[tuple[str, str], dict[str, Any]]:
    values = {
        "secretKey": "s3cret",
        "databaseUrl": "postgres://portal:pw@db.example:5432/portal",
        "redisUrl": "redis://redis.example:6379/0",
        "agentJoinToken": "join-me",
        "allowedHosts": ["portal.example.com"],
    }
    helm = pytest.importorskip("helm_python.chart", reason="helm-python-sdk absent")
    out = helm.Chart.load(CHART).render(
        values, name="portal", namespace=RELEASE_NAMESPACE, is_install=True
    )
    docs = [doc for name, text in out.items() if name.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]  # fmt: skip
    return {(o["kind"], o["metadata"]["name"]): o for o in docs}


def install_device_class(kube: ClusterKube) -> dict[str, Any]:
    """The chart's DeviceClass, as Helm renders it against a 1.34 cluster (v1)."""
    klass = chart_objects()["DeviceClass", DEVICE_CLASS]
    return kube.apply({**klass, "apiVersion": "resource.k8s.io/v1"})


def publish_slice(
    cluster: Cluster, node: str, clique: str = "", domain: str = "", *, eligible: bool = True
) -> dict[str, Any]:
    api = ResourceApi(cluster.api_client())
    facts = SliceFacts(node=node, clique=clique, gpus=4, domain=domain, eligible=eligible)
    SlicePublisher(api).publish(facts)
    published = api.get_slice(slice_name(node))
    assert published is not None
    return published


def publish_as_its_agent(cluster: Cluster, tray: Node) -> dict[str, Any]:
    """The tray's slice with what its agent learns from the portal's desired state: the
    domain it serves and whether a claim may make it a new member."""
    serving, eligible = scheduling(desired_state_for(tray))
    clique = tray.clique.label if tray.clique else ""
    return publish_slice(cluster, tray.hostname, clique=clique, domain=serving, eligible=eligible)
