"""Fixtures for the Kubernetes tests: a mock API server the official client talks to over
HTTP, watchers driven step by step, and Celery tasks run eagerly in the test process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from domains.kube.client import api_client
from domains.kube.sync import Watcher, resources
from portal.celery import app as celery_app
from tests.kube.schemas import computedomain_errors, dra_errors
from tests.support import kubemock

RACK_LABEL = "topology.kubernetes.io/rack"
CLUSTER = "6f0b9b84-4c1e-4a8e-9d9e-2f1f3c0d9a11"


@pytest.fixture
def kube(tmp_path, settings, monkeypatch) -> Iterator[kubemock.KubeMock]:
    with kubemock.running() as mock:
        mock.max_watch_seconds = 0.2
        mock.validators["computedomains"] = computedomain_errors  # as the CRD would
        for plural in ("resourceclaimtemplates", "resourceclaims", "resourceslices"):
            mock.validators[plural] = dra_errors  # as Kubernetes 1.34 (v1) / 1.32 (v1beta1)
        for name in ("team-a", "team-b"):  # the fixtures' tenants exist in the cluster too
            mock.put_namespace(name)
        monkeypatch.setenv("KUBECONFIG", str(mock.write_kubeconfig(tmp_path / "kubeconfig")))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        settings.PORTAL = {
            **settings.PORTAL,
            "KUBE_ENABLED": True,
            "KUBE_RACK_LABEL": RACK_LABEL,
            "KUBE_NAMESPACE_LABEL": "",
        }
        yield mock


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Queued tasks run at once in this process (the e2e test uses a real worker)."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager = before


class Sync:
    """The three watchers, driven one step at a time, committing like the real process."""

    def __init__(self, capture: Any) -> None:
        api = api_client()
        self.watchers = {r.name: Watcher(r, resync_s=3600) for r in resources(api)}
        self.capture = capture

    def step(self, *names: str) -> list[bool]:
        """One list-or-watch round per watcher; after-commit callbacks run, as in production."""
        results = []
        for name in names or tuple(self.watchers):
            with self.capture(execute=True):
                results.append(self.watchers[name].step())
        return results

    def __getitem__(self, name: str) -> Watcher:
        return self.watchers[name]


@pytest.fixture
def sync(kube, eager_celery, django_capture_on_commit_callbacks) -> Sync:
    return Sync(django_capture_on_commit_callbacks)


def gpu_labels(clique: int = 1, rack: str = "r1", **extra: str) -> dict[str, str]:
    return {
        "nvidia.com/gpu.clique": f"{CLUSTER}.{clique}",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.product": "NVIDIA-GB200",
        RACK_LABEL: rack,
        **extra,
    }


def computedomain(name: str, namespace: str, num_nodes: int = 2, **channel: str) -> dict:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, **channel},
        },
    }
