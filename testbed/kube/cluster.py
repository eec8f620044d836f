"""Upstream's Kubernetes control plane for the tests: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager (its resourceclaim controller), built from upstream's Go modules.

`scripts/kube_build.sh` builds the binaries from `tools/kubeplane` into a cache keyed by the
Kubernetes version; `kube_binaries()` calls it (nothing is built when they are there).

    with running_cluster(tmp_path) as cluster:
        api = cluster.api_client()

starts etcd, then kube-apiserver with certificates and a service-account key made for the
run (RBAC authorization; the admin is a static token in `system:masters`, which may
impersonate anyone), then the scheduler and the controller manager with the admin's
kubeconfig. On the way out the apiserver stops before etcd, so it never spins on a lost
store. `ClusterKube` is the small helper tests use to read and write objects by plural, as
kubectl would.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from testbed.processes import ROOT, Proc, free_port, wait_until
from testbed.processes import wait_for as wait_for  # the tests' one wait, re-exported

BUILD_SCRIPT = ROOT / "scripts/kube_build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
# The controllers a DRA workload needs (claims made from templates for pods, the default
# ServiceAccount of each namespace, a Job's pods), the one that removes a deleted namespace,
# and the garbage collector (a deleted pod's generated ResourceClaim goes with it, by its
# owner reference, as in any cluster). No node lifecycle controller: the tests' Nodes
# without a kubelet would be tainted unreachable; a real node's not-ready taint is lifted
# by its fixture (testbed.kube.node) once the kubelet reports Ready.
CONTROLLERS = ",".join(
    ("resourceclaim-controller", "serviceaccount-controller", "namespace-controller",
     "job-controller", "garbage-collector-controller")
)  # fmt: skip
START_TIMEOUT_S = 60.0


class BuildFailed(RuntimeError):
    """The control plane could not be built (no Go, no module proxy, a compile error)."""


def kube_binaries() -> Path:
    """The directory holding the four binaries, built first if they are missing.

    `KUBE_BIN_DIR` names a directory of prebuilt binaries instead.
    """
    if named := os.environ.get("KUBE_BIN_DIR"):
        return Path(named)
    done = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    if done.returncode != 0:
        raise BuildFailed(f"{BUILD_SCRIPT.name} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def kube_binaries_built() -> bool:
    """Whether the binaries of this module's content are in the cache already."""
    done = subprocess.run([str(BUILD_SCRIPT), "--check"], capture_output=True, cwd=ROOT)
    return done.returncode == 0


@dataclass(frozen=True)
class Cluster:
    """A running control plane: its URL and an admin kubeconfig."""

    url: str
    kubeconfig: Path
    ca: Path
    token: str
    workdir: Path

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def impersonating(
        self, user: str, groups: tuple[str, ...] = (), extra: dict[str, list[str]] | None = None
    ) -> client.ApiClient:
        """An admin client that acts as `user` (Impersonate-* headers, as `kubectl --as`)."""
        api = self.api_client()
        api.set_default_header("Impersonate-User", user)
        # The generated client sends one value per header name: one group is all we need.
        for group in groups[:1]:
            api.set_default_header("Impersonate-Group", group)
        for key, values in (extra or {}).items():
            for value in values[:1]:
                api.set_default_header(f"Impersonate-Extra-{key}", value)
        return api


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> None:
    """A CA, the apiserver's serving certificate for 127.0.0.1, and the service-account key."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=kubeplane-ca", cwd=directory)  # fmt: skip
    _openssl("req", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr",
             "-subj", "/CN=kube-apiserver", cwd=directory)  # fmt: skip
    (directory / "apiserver.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "apiserver.crt", "-days", "2",
             "-extfile", "apiserver.ext", cwd=directory)  # fmt: skip
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key",
             cwd=directory)  # fmt: skip
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


def write_kubeconfig(path: Path, *, url: str, ca: Path, token: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "kubeplane",
                        "cluster": {"server": url, "certificate-authority": str(ca)},
                    }
                ],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [
                    {"name": "admin", "context": {"cluster": "kubeplane", "user": "admin"}}
                ],
                "current-context": "admin",
            }
        )
    )
    return path


def _start_etcd(bin_dir: Path, workdir: Path) -> tuple[Proc, str]:
    client_url = f"http://127.0.0.1:{free_port()}"
    peer_url = f"http://127.0.0.1:{free_port()}"
    proc = Proc(
        "etcd",
        [
            str(bin_dir / "etcd"),
            "--name=kubeplane",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=kubeplane={peer_url}",
            "--unsafe-no-fsync",  # a test store: speed over durability
            "--log-level=warn",
        ],
        env=dict(os.environ),
    )

    def healthy() -> bool:
        _alive(proc)
        try:
            return json.loads(_get(f"{client_url}/health")).get("health") == "true"
        except (urllib3.exceptions.HTTPError, ValueError):
            return False

    wait_until(healthy, timeout=START_TIMEOUT_S, what="etcd to be healthy")
    return proc, client_url


def _apiserver_argv(bin_dir: Path, workdir: Path, etcd_url: str, port: int) -> list[str]:
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir}",
        f"--tls-cert-file={workdir / 'apiserver.crt'}",
        f"--tls-private-key-file={workdir / 'apiserver.key'}",
        f"--client-ca-file={workdir / 'ca.crt'}",
        f"--token-auth-file={workdir / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-account-key-file={workdir / 'sa.pub'}",
        f"--service-account-signing-key-file={workdir / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        # Pods name no ServiceAccount that must already exist (as envtest runs it).
        "--disable-admission-plugins=ServiceAccount",
        "--runtime-config=resource.k8s.io/v1=true",
        # A real node's kubelet serves logs and exec on its InternalIP (testbed.kube.node).
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ]


def _start_apiserver(bin_dir: Path, workdir: Path, etcd_url: str, token: str) -> tuple[Proc, str]:
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    (workdir / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
    proc = Proc(
        "kube-apiserver",
        _apiserver_argv(bin_dir, workdir, etcd_url, port),
        env=dict(os.environ),
    )
    ca = ssl.create_default_context(cafile=str(workdir / "ca.crt"))
    headers = {"Authorization": f"Bearer {token}"}

    def ready() -> bool:
        _alive(proc)
        try:
            return _get(f"{url}/readyz", headers=headers, context=ca) == "ok"
        except urllib3.exceptions.HTTPError:
            return False

    wait_until(ready, timeout=START_TIMEOUT_S, interval=0.1, what="kube-apiserver /readyz")
    return proc, url


def _get(url: str, headers: dict[str, str] | None = None, context: Any = None) -> str:
    """One quiet GET (httpx would log every readiness poll into the captured logs)."""
    pool = urllib3.PoolManager(ssl_context=context, timeout=2.0, retries=False)
    return str(pool.request("GET", url, headers=headers).data.decode())


def _alive(proc: Proc) -> None:
    if not proc.alive():
        raise RuntimeError(f"{proc.name} exited:\n{proc.log()[-4000:]}")


@contextmanager
def running_cluster(workdir: Path, bin_dir: Path | None = None) -> Iterator[Cluster]:
    """The control plane, up and ready; stopped in reverse order (apiserver before etcd)."""
    bin_dir = bin_dir or kube_binaries()
    make_pki(workdir)
    token = secrets.token_hex(16)
    with ExitStack() as stack:
        etcd, etcd_url = _start_etcd(bin_dir, workdir)
        stack.callback(etcd.stop)
        apiserver, url = _start_apiserver(bin_dir, workdir, etcd_url, token)
        stack.callback(apiserver.stop)
        kubeconfig = write_kubeconfig(
            workdir / "kubeconfig", url=url, ca=workdir / "ca.crt", token=token
        )
        common = [f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0"]
        scheduler = Proc(
            "kube-scheduler", [str(bin_dir / "kube-scheduler"), *common], dict(os.environ)
        )
        stack.callback(scheduler.stop)
        manager = Proc(
            "kube-controller-manager",
            [str(bin_dir / "kube-controller-manager"), *common, f"--controllers={CONTROLLERS}"],
            dict(os.environ),
        )
        stack.callback(manager.stop)
        cluster = Cluster(url, kubeconfig, workdir / "ca.crt", token, workdir)
        _wait_for_default_namespace(cluster, (scheduler, manager))
        yield cluster


def _wait_for_default_namespace(cluster: Cluster, procs: tuple[Proc, ...]) -> None:
    """The serviceaccount controller has made `default`'s ServiceAccount: it is running."""
    core = client.CoreV1Api(cluster.api_client())

    def made() -> bool:
        for proc in procs:
            _alive(proc)
        try:
            core.read_namespaced_service_account("default", "default")
        except ApiException:
            return False
        return True

    wait_until(made, timeout=START_TIMEOUT_S, what="kube-controller-manager to start")


class ClusterKube:
    """Objects by plural, as kubectl sees them: `get`, `apply` (create or replace), `delete`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.api = cluster.api_client()
        self.dynamic = DynamicClient(self.api)

    def resource(self, plural: str, api_version: str = "") -> Any:
        kwargs = {"name": plural}
        if api_version:
            kwargs["api_version"] = api_version
        return self.dynamic.resources.get(**kwargs)

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.resource(plural).get(name=name, namespace=namespace).to_dict()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        res = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        current = self.get(res.name, meta["name"], meta.get("namespace"))
        if current is None:
            return res.create(body=obj, namespace=meta.get("namespace")).to_dict()
        body = {
            **obj,
            "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]},
        }
        return res.replace(body=body, namespace=meta.get("namespace")).to_dict()

    def delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        try:
            self.resource(plural).delete(name=name, namespace=namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def put_namespace(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return self.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": labels or {}},
            }
        )

    def put_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        ip: str = "",
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        """A Node as a kubelet registers it (Ready, room for pods, untainted), with exactly
        these labels; `unschedulable` as `kubectl cordon` sets it."""
        core = client.CoreV1Api(self.api)
        wanted = {"kubernetes.io/hostname": name, **(labels or {})}
        try:
            node = core.read_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            node = core.create_node({"metadata": {"name": name, "labels": wanted}})
        node.metadata.labels = wanted
        node.spec.unschedulable = unschedulable or None
        # The TaintNodesByCondition admission plugin taints a new Node not-ready; the node
        # lifecycle controller would lift it once the kubelet reports Ready.
        node.spec.taints = None
        core.replace_node(name, node)
        capacity = {"cpu": "72", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "4"}
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
        status: dict[str, Any] = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [ready],
            "addresses": [{"type": "InternalIP", "address": ip}] if ip else [],
        }
        answer = core.patch_node_status(name, {"status": status})
        return cast(dict[str, Any], self.api.sanitize_for_serialization(answer))

    def wait_established(self, crd: str) -> None:
        """The CRD's API is served (and discovery knows it)."""

        def established() -> bool:
            obj = self.get("customresourcedefinitions", crd) or {}
            conditions = (obj.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_for(established, what=f"CRD {crd} to be established")
        self.dynamic = DynamicClient(self.api)  # discovery again, with the new kind

    def delete_all(self, plural: str) -> None:
        """Every object of that kind, in all namespaces. Finalizers no controller here will
        lift (a Job's on its pods) are dropped; a claim's is waited for, the resourceclaim
        controller lifts it once its device is free."""
        res = self.resource(plural)
        for item in res.get().items:
            self.delete(plural, item.metadata.name, item.metadata.namespace)
        if plural != "resourceclaims":
            self._drop_finalizers(res)
        try:
            wait_for(lambda: not res.get().items, timeout=5, what=f"{plural} to be deleted")
        except TimeoutError:
            self._drop_finalizers(res)

    @staticmethod
    def _drop_finalizers(res: Any) -> None:
        for item in res.get().items:
            if item.metadata.finalizers:
                with contextlib.suppress(ApiException):
                    res.patch(
                        name=item.metadata.name,
                        namespace=item.metadata.namespace,
                        body={"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )
