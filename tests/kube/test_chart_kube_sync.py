"""kube-sync as the chart runs it: two replicas electing a leader over a Lease, with only the
chart's RBAC for it (checked against upstream's kube-apiserver with the account's token)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from domains.kube.election import Elector, Timing
from testbed.kube.chartobjects import RELEASE_NAMESPACE, chart_objects
from testbed.kube.cluster import Cluster, ClusterKube, write_kubeconfig

PORTAL = "portal-domain-portal"
LEASE = f"{PORTAL}-kube-sync"


def kube_sync() -> dict:
    return chart_objects()["Deployment", LEASE]


def test_two_replicas_elect_a_leader_over_the_lease_the_role_names():
    objects = chart_objects()
    deployment = kube_sync()
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:3] == ["python", "manage.py", "kube_sync"]
    assert "--leader-elect" in args and f"--lease-name={LEASE}" in args
    assert {"--lease-duration=15", "--renew-deadline=10", "--retry-period=2"} <= set(args)
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    role = objects["Role", f"{PORTAL}-kube-sync-lease"]
    assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [LEASE],
            "verbs": ["get", "update"],
        }
    ]
    binding = objects["RoleBinding", f"{PORTAL}-kube-sync-lease"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "gpu-portal"}
    ]


@pytest.fixture
def portal_account(
    real_kube: ClusterKube, cluster: Cluster, tmp_path
) -> Iterator[client.ApiClient]:
    """An API client holding a real token of the chart's portal account, with the chart's
    lease Role bound to it."""
    objects = chart_objects()
    real_kube.put_namespace(RELEASE_NAMESPACE)
    for kind, name in (
        ("ServiceAccount", PORTAL),
        ("Role", f"{PORTAL}-kube-sync-lease"),
        ("RoleBinding", f"{PORTAL}-kube-sync-lease"),
    ):
        obj = objects[kind, name]
        real_kube.apply({**obj, "metadata": {**obj["metadata"], "namespace": RELEASE_NAMESPACE}})
    core = client.CoreV1Api(cluster.api_client())
    token = core.create_namespaced_service_account_token(
        PORTAL, RELEASE_NAMESPACE, {"spec": {"expirationSeconds": 600}}
    ).status.token

    path = write_kubeconfig(tmp_path / "portal", url=cluster.url, ca=cluster.ca, token=token)
    yield config.new_client_from_config(config_file=str(path))
    real_kube.delete("leases", LEASE, RELEASE_NAMESPACE)


@pytest.mark.cluster
@pytest.mark.django_db
def test_the_charts_rbac_lets_kube_sync_take_renew_and_release_its_lease_only(portal_account):
    timing = Timing(lease_s=4, renew_deadline_s=3, retry_s=0.5)
    one = Elector(portal_account, namespace=RELEASE_NAMESPACE, name=LEASE, timing=timing)
    two = Elector(portal_account, namespace=RELEASE_NAMESPACE, name=LEASE, timing=timing)
    assert one.try_acquire_or_renew() and one.leading()  # created
    assert one.try_acquire_or_renew()  # renewed (update)
    assert not two.try_acquire_or_renew() and not two.leading()
    one.release()
    assert not one.leading()
    assert two.try_acquire_or_renew()  # released: taken at once
    # Another Lease in the namespace is not the portal's to read or take over.
    other = Elector(portal_account, namespace=RELEASE_NAMESPACE, name="someone-else", timing=timing)
    with pytest.raises(ApiException) as refused:
        other.leases.read_namespaced_lease("someone-else", RELEASE_NAMESPACE)
    assert refused.value.status == 403
    assert not other.try_acquire_or_renew()
