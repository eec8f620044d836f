"""The chart's ServiceAccounts with real tokens from kube-apiserver: the portal does its whole
Kubernetes job with only the chart's RBAC, an agent's pod-bound token passes a real
TokenReview made as the web's account, and with that token the agent writes its own node's
ResourceSlice and no other (RBAC, then the chart's admission policy)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from domains.audit.events import Actor
from domains.computedomains.services import domain_release
from domains.errors import PermissionDenied
from domains.kube import tokenreview
from nodeagent.dra.kubeapi import KubeError, ResourceApi
from nodeagent.dra.slices import SliceFacts, SlicePublisher, slice_name, slice_object
from testbed.kube.chartobjects import RELEASE_NAMESPACE, chart_objects, publish_slice
from testbed.kube.cluster import Cluster, ClusterKube, wait_for, write_kubeconfig
from tests.kube.conftest import Sync
from tests.support.lifecycle import all_clean, all_ready, request_and_place, run_pods

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

PORTAL = "portal-domain-portal"
WEB = f"{PORTAL}-web"
AGENT = f"{PORTAL}-agent"
NODE = "gb-r01-t01"
KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")


@pytest.fixture
def chart_accounts(real_kube: ClusterKube, cluster: Cluster) -> Iterator[None]:
    """The chart's ServiceAccounts, ClusterRoles and bindings (and the slice policy)."""
    objects = chart_objects()
    real_kube.put_namespace(RELEASE_NAMESPACE)
    installed = [o for (kind, _), o in objects.items() if kind in KINDS]
    installed += [o for (kind, _), o in objects.items() if "AdmissionPolicy" in kind]
    for obj in installed:
        if obj["kind"] == "ServiceAccount":  # Helm gives it the release's namespace
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": RELEASE_NAMESPACE}}
        real_kube.apply(obj)
    yield
    rbac = client.RbacAuthorizationV1Api(cluster.api_client())
    for name in (PORTAL, WEB, AGENT):
        for fn in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                fn(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def token_for(
    cluster: Cluster, account: str, *, pod: dict[str, Any] | None = None, audience: str = ""
) -> str:
    """A token from the TokenRequest API, as the kubelet asks for a pod's projected one."""
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if audience:
        spec["audiences"] = [audience]
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {
            "apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]
        }  # fmt: skip
    core = client.CoreV1Api(cluster.api_client())
    answer = core.create_namespaced_service_account_token(
        account, RELEASE_NAMESPACE, {"spec": spec}
    )
    return str(answer.status.token)


def kubeconfig_as(cluster: Cluster, token: str, path: Path) -> Path:
    return write_kubeconfig(path, url=cluster.url, ca=cluster.ca, token=token)


def agent_pod(kube: ClusterKube, node: str, name: str = "agent-x1") -> dict[str, Any]:
    """The agent DaemonSet's pod on `node` (bound there directly: no kubelet runs it)."""
    kube.put_node(node)
    return kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": RELEASE_NAMESPACE},
            "spec": {
                "nodeName": node,
                "serviceAccountName": AGENT,
                "containers": [{"name": "agent", "image": "domain-portal"}],
            },
        }
    )


def test_the_portal_does_its_kubernetes_job_with_only_the_charts_rbac(
    chart_accounts, cluster, real_kube, tmp_path, monkeypatch,
    eager_celery, django_capture_on_commit_callbacks, topology, ns_a, tenant_a,
):  # fmt: skip
    token = token_for(cluster, PORTAL)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_as(cluster, token, tmp_path / "portal")))
    sync = Sync(django_capture_on_commit_callbacks, watch_timeout_s=1)  # as the portal
    assert sync.step() == [True] * 4  # list nodes, namespaces, computedomains, pods
    with django_capture_on_commit_callbacks(execute=True):
        domain = request_and_place(ns_a, tenant_a, num_nodes=2)
        all_ready(domain)
        run_pods(domain)
    obj = real_kube.get("computedomains", "train", "team-a")
    assert obj["status"]["status"] == "Ready"  # computedomains/status, patched
    assert real_kube.get("resourceclaimtemplates", "train-channel", "team-a") is not None
    assert sync.step() == [True] * 4  # and watch them

    with django_capture_on_commit_callbacks(execute=True):
        domain_release(actor=Actor.for_user(tenant_a), domain=domain)
        all_clean(domain)
    assert real_kube.get("computedomains", "train", "team-a") is None
    assert real_kube.get("resourceclaimtemplates", "train-channel", "team-a") is None


def test_the_portals_account_may_not_touch_what_it_does_not_need(
    chart_accounts, cluster, real_kube, tmp_path
):
    api = client.CoreV1Api(client.ApiClient(_configuration(cluster, token_for(cluster, PORTAL))))
    with pytest.raises(ApiException) as caught:
        api.list_namespaced_secret("team-a")
    assert caught.value.status == 403
    real_kube.put_node(NODE)
    with pytest.raises(ApiException) as caught:
        api.patch_node(NODE, {"spec": {"unschedulable": True}})
    assert caught.value.status == 403


def test_an_agents_pod_token_passes_a_real_token_review_made_as_the_web(
    chart_accounts, cluster, real_kube, tmp_path, monkeypatch, settings
):
    audience = settings.PORTAL["AGENT_TOKEN_AUDIENCE"]
    settings.PORTAL = {
        **settings.PORTAL,
        "AGENT_SERVICE_ACCOUNTS": [f"{RELEASE_NAMESPACE}:{AGENT}"],
    }
    web = kubeconfig_as(cluster, token_for(cluster, WEB), tmp_path / "web")
    monkeypatch.setenv("KUBECONFIG", str(web))
    tokenreview.REVIEWS.clear()
    pod = agent_pod(real_kube, NODE)
    token = token_for(cluster, AGENT, pod=pod, audience=audience)

    identity = tokenreview.agent_token_verify(token, hostname=NODE)
    assert (identity.node_name, identity.pod_name) == (NODE, "agent-x1")
    assert identity.username == f"system:serviceaccount:{RELEASE_NAMESPACE}:{AGENT}"
    with pytest.raises(PermissionDenied, match="another node"):
        tokenreview.agent_token_verify(token, hostname="gb-r01-t02")
    other_audience = token_for(cluster, AGENT, pod=pod, audience="someone-else")
    with pytest.raises(PermissionDenied, match="not for this portal"):
        tokenreview.agent_token_verify(other_audience, hostname=NODE)
    unbound = token_for(cluster, AGENT, audience=audience)
    with pytest.raises(PermissionDenied, match="bound to no node"):
        tokenreview.agent_token_verify(unbound, hostname=NODE)
    web_token = token_for(cluster, WEB, audience=audience)
    with pytest.raises(PermissionDenied, match="not the node agents'"):
        tokenreview.agent_token_verify(web_token, hostname=NODE)

    real_kube.delete("pods", "agent-x1", RELEASE_NAMESPACE)  # the pod is gone
    wait_for(lambda: real_kube.get("pods", "agent-x1", RELEASE_NAMESPACE) is None)

    def refused() -> str:
        tokenreview.REVIEWS.clear()
        try:
            tokenreview.agent_token_verify(token, hostname=NODE)
        except PermissionDenied as exc:
            return str(exc)
        return ""

    # kube-apiserver keeps a token's successful authentication for 10 s: the token dies
    # with its pod within that, beside the portal's own review cache (cleared here).
    assert "not valid" in wait_for(refused, timeout=20, what="the token to die with its pod")


def test_an_agent_with_its_pod_token_writes_its_own_nodes_slice_and_no_other(
    chart_accounts, cluster, real_kube, tmp_path
):
    token = token_for(cluster, AGENT, pod=agent_pod(real_kube, NODE))
    agent = ResourceApi(
        client.ApiClient(_configuration(cluster, token)), version="v1"
    )  # what the agent builds from its kubeconfig or in-cluster config
    other = slice_object(SliceFacts(node="gb-r01-t02", clique="", gpus=4), version="v1",
                         generation=1)  # fmt: skip

    def refused() -> str:
        try:
            agent.create_slice(other)
        except KubeError as exc:
            return str(exc)
        real_kube.delete("resourceslices", slice_name("gb-r01-t02"))  # the policy not yet
        return ""

    assert "denied" in wait_for(refused, what="the admission policy to be enforced")
    # Its own node, but another tray's pool name (the claim check trusts pool names).
    posing = slice_object(SliceFacts(node=NODE, clique="", gpus=4), version="v1", generation=1)
    posing["spec"]["pool"]["name"] = "gb-r01-t02"
    with pytest.raises(KubeError, match="denied"):  # the admission policy
        agent.create_slice(posing)
    assert SlicePublisher(agent).publish(SliceFacts(node=NODE, clique="", gpus=4))
    assert real_kube.get("resourceslices", slice_name(NODE))["spec"]["nodeName"] == NODE
    theirs = publish_slice(cluster, "gb-r01-t03")  # by the admin
    with pytest.raises(KubeError, match="denied"):  # the admission policy
        agent.delete_slice(theirs["metadata"]["name"])
    with pytest.raises(KubeError, match="answered 403"):  # RBAC: only claims and slices
        agent._call(client.CoreV1Api(agent.api).list_namespaced_pod, RELEASE_NAMESPACE)


def _configuration(cluster: Cluster, token: str) -> client.Configuration:
    cfg = client.Configuration()
    cfg.host = cluster.url
    cfg.ssl_ca_cert = str(cluster.ca)
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return cfg
