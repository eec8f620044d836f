"""Fixtures for the Kubernetes tests: upstream's control plane (`cluster`, `real_kube`), a
mock API server the official client talks to over HTTP (for the faults a real server cannot
be made to show), watchers driven step by step, and Celery tasks run eagerly in the test
process."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from domains.audit.events import Actor
from domains.kube.client import api_client
from domains.kube.sync import Watcher, resources
from domains.tenancy.tokens import token_create
from portal.celery import app as celery_app
from testbed import factories
from testbed.kube import kubemock
from testbed.kube.cluster import (
    BuildFailed,
    Cluster,
    ClusterKube,
    kube_binaries,
    kube_binaries_built,
    running_cluster,
)
from testbed.kube.node import containerd_binaries, containerd_built, missing_for_nodes
from testbed.kube.objects import RACK_LABEL
from testbed.kube.schemas import CRD_PATH, computedomain_errors, dra_errors
from testbed.processes import (
    VENV_BIN,
    Proc,
    process_env,
    running,
    start_beat,
    start_server,
    start_worker,
    wait_for,
)
from tests.support.workloads import ENV as WORKLOAD_ENV
from tests.support.workloads import Run


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected
def pytest_collection_modifyitems(config, items) -> None:
    """Build the control plane before any test runs when one is selected that needs it, so
    a cold build (minutes) never counts against a test's timeout."""
    if any(item.get_closest_marker("cluster") for item in items):
        if not os.environ.get("KUBE_BIN_DIR") and not kube_binaries_built():
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(
                    "building upstream's Kubernetes control plane (scripts/kube_build.sh): "
                    "a few minutes the first time"
                )
        try:
            kube_binaries()
        except BuildFailed as exc:
            raise pytest.UsageError(str(exc)) from exc
    nodes = [item for item in items if item.get_closest_marker("node")]
    if nodes:
        _prepare_nodes(config, nodes)


def _prepare_nodes(config, items) -> None:
    """The real nodes' tests: skipped where this machine can't run a node (not root, no
    runc, CNI plugins or busybox-static); otherwise containerd built before they run."""
    if missing := missing_for_nodes():
        skip = pytest.mark.skip(reason=f"a real node needs {', '.join(missing)}")
        for item in items:
            item.add_marker(skip)
        return
    if not os.environ.get("CONTAINERD_BIN_DIR") and not containerd_built():
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("building containerd (scripts/containerd_build.sh)")
    try:
        containerd_binaries()
    except RuntimeError as exc:
        raise pytest.UsageError(str(exc)) from exc


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """Upstream's etcd, kube-apiserver, kube-scheduler and resourceclaim controller, with
    NVIDIA's ComputeDomain CRD installed; one per test session."""
    with running_cluster(tmp_path_factory.mktemp("kubeplane")) as running:
        kube = ClusterKube(running)
        kube.apply(yaml.safe_load(CRD_PATH.read_text()))
        kube.wait_established("computedomains.resource.nvidia.com")
        yield running


# What tests make, deleted after each (in every namespace): pods before their claims.
CLEANED = (
    "jobs",
    "pods",
    "resourceclaims",
    "resourceclaimtemplates",
    "computedomains",
    "resourceslices",
    "deviceclasses",
    "nodes",
    "validatingadmissionpolicybindings",
    "validatingadmissionpolicies",
)


@pytest.fixture
def real_kube(cluster, tmp_path, settings, monkeypatch) -> Iterator[ClusterKube]:
    """The portal pointed at the real API server, with the fixtures' tenants as namespaces;
    what a test created is deleted after it."""
    kube = ClusterKube(cluster)
    for name in ("team-a", "team-b"):
        kube.put_namespace(name)
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings.PORTAL = {
        **settings.PORTAL,
        "KUBE_ENABLED": True,
        "KUBE_RACK_LABEL": RACK_LABEL,
        "KUBE_NAMESPACE_LABEL": "",
    }
    yield kube
    for plural in CLEANED:
        kube.delete_all(plural)


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, cluster: Cluster) -> Iterator[str]:
    """The real server and Celery worker, publishing to upstream's API server."""
    env = {"KUBECONFIG": str(cluster.kubeconfig), "PORTAL_KUBE_ENABLED": "1"}
    server, url = start_server(**env)
    worker = start_worker(concurrency=4, **env)
    with running(worker, server):
        yield url


@pytest.fixture
def tenant_api(request, transactional_db, portal: str) -> Iterator[httpx.Client]:
    """A member of the test module's `NAMESPACE`, calling the portal's API with a token."""
    namespace = request.module.NAMESPACE
    ns = factories.make_namespace(namespace)
    user = factories.make_user(f"{namespace}-tenant")
    factories.add_member(user, ns, "member")
    _, raw = token_create(actor=Actor.for_user(user), user=user, name=namespace)
    with httpx.Client(
        base_url=f"{portal}/api/v1/namespaces/{namespace}",
        headers={"Authorization": f"Bearer {raw}"},
        timeout=30,
    ) as api:
        yield api


@pytest.fixture
def kubelet_dirs() -> Iterator[Path]:
    """Every tray's kubelet directory, under a short path (unix sockets: 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kd-") as tmp:
        yield Path(tmp)


# --- workload files run as a user runs them (tests.support.workloads) -------------------


@pytest.fixture(scope="module")
def workload_portal(django_db_setup, django_db_blocker, cluster: Cluster) -> Iterator[str]:
    """The real server, Celery worker and beat, publishing to upstream's API server, racks
    read from the Nodes' labels (tests.support.workloads)."""
    env = {"KUBECONFIG": str(cluster.kubeconfig), **WORKLOAD_ENV}
    server, url = start_server(**env)
    worker = start_worker(concurrency=4, **env)
    beat = start_beat(PORTAL_KUBE_RECONCILE_SECONDS="2", **env)
    with running(beat, worker, server):
        yield url


@pytest.fixture
def workload_sync(
    real_kube: ClusterKube, cluster: Cluster, workload_portal: str
) -> Iterator[Callable[[], Proc]]:
    """`manage.py kube_sync` as production runs it, started once the test's Nodes and
    namespace are in the cluster (`start()`); stopped before `real_kube` cleans up."""
    procs: list[Proc] = []

    def start() -> Proc:
        argv = [str(VENV_BIN / "python"), "manage.py", "kube_sync", "--watch-timeout", "5"]
        proc = Proc(
            "kube-sync", argv, process_env(KUBECONFIG=str(cluster.kubeconfig), **WORKLOAD_ENV)
        )
        procs.append(proc)
        wait_for(lambda: "watching" in proc.log() or not proc.alive(), 30, "kube_sync to start")
        assert proc.alive(), proc.log()
        return proc

    yield start
    for proc in procs:
        proc.stop()


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    """Every Node's kubelet directory, under a short path (unix sockets: 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kw-") as tmp:
        yield Path(tmp)


@pytest.fixture
def workload_run(
    real_kube: ClusterKube,
    cluster: Cluster,
    workload_portal: str,
    workload_sync: Callable[[], Proc],
    kubelet_root: Path,
) -> Callable[..., Run]:
    """`workload_run(manifest, ip_prefix=…, layouts=…)`: a `Run` of the file on the suite's
    control plane, portal, kube_sync and kubelets."""

    def run(manifest: Path, **options: Any) -> Run:
        return Run(
            manifest, real_kube, cluster, workload_portal, workload_sync, kubelet_root, **options
        )

    return run


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

    def __init__(self, capture: Any, watch_timeout_s: int = 300) -> None:
        api = api_client()
        self.watchers = {
            r.name: Watcher(r, resync_s=3600, watch_timeout_s=watch_timeout_s)
            for r in resources(api)
        }
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


@pytest.fixture
def real_sync(real_kube, eager_celery, django_capture_on_commit_callbacks) -> Sync:
    """The watchers against the real API server; a watch step ends after a second."""
    return Sync(django_capture_on_commit_callbacks, watch_timeout_s=1)
