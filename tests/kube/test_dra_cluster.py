"""DRA against upstream's control plane: the chart's DeviceClass, the agents' ResourceSlices
and the domain's ResourceClaimTemplate as kube-apiserver 1.34 takes them; kube-scheduler
allocating a pod's claim from the published slices; and the chart's admission policy that
keeps each agent to its own node's slice, run by the real CEL engine."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentwire.messages import ClaimRef
from domains.audit.events import Actor
from domains.computedomains.claims import claim_admit
from domains.computedomains.services import domain_release
from domains.foresight.maintenance import maintenance_schedule
from domains.kube import tasks
from nodeagent.dra import DEVICE_NAME, DRIVER_NAME
from nodeagent.dra.kubeapi import ResourceApi
from nodeagent.dra.slices import SliceFacts, SlicePublisher, slice_name, slice_object
from testbed import factories
from testbed.kube.chartobjects import (
    RELEASE_NAMESPACE,
    chart_objects,
    install_device_class,
    publish_as_its_agent,
    publish_slice,
)
from testbed.kube.cluster import Cluster, ClusterKube, wait_for
from testbed.kube.objects import claim_of, gpu_labels, pod_with_claim
from tests.support.lifecycle import request_and_place, request_domain

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

AGENT = f"system:serviceaccount:{RELEASE_NAMESPACE}:portal-domain-portal-agent"
NODE_EXTRA = "authentication.kubernetes.io/node-name"
POD_EXTRA = "authentication.kubernetes.io/pod-name"


def test_the_charts_device_class_and_a_trays_slice_are_taken_as_published(real_kube, cluster):
    klass = install_device_class(real_kube)
    assert klass["apiVersion"] == "resource.k8s.io/v1"
    real_kube.put_node("gb-r01-t01", gpu_labels())
    stored = publish_slice(cluster, "gb-r01-t01", clique="c.1")
    assert stored["spec"]["driver"] == DRIVER_NAME
    assert stored["spec"]["pool"] == {
        "name": "gb-r01-t01",
        "generation": 1,
        "resourceSliceCount": 1,
    }
    (device,) = stored["spec"]["devices"]
    assert device["name"] == DEVICE_NAME
    assert device["attributes"]["clique"] == {"string": "c.1"}

    # New facts rewrite the slice under a new pool generation, on the stored version.
    SlicePublisher(ResourceApi(cluster.api_client())).publish(
        SliceFacts(node="gb-r01-t01", clique="c.2", gpus=4)
    )
    again = real_kube.get("resourceslices", slice_name("gb-r01-t01"))
    assert again["spec"]["pool"]["generation"] == 2
    assert again["spec"]["devices"][0]["attributes"]["clique"] == {"string": "c.2"}


def test_a_slice_with_two_devices_of_one_name_is_refused(real_kube, cluster):
    """The apiserver's own validation of DRA objects, beyond their OpenAPI schema."""
    body = publish_slice(cluster, "gb-r01-t02")
    body["spec"]["devices"].append(dict(body["spec"]["devices"][0]))
    with pytest.raises(ApiException) as caught:
        real_kube.apply(body)
    assert caught.value.status == 422
    assert "duplicate" in caught.value.body.lower()


def test_kube_scheduler_allocates_a_pods_claim_from_the_published_slices(
    real_kube, cluster, topology, ns_a, tenant_a
):
    install_device_class(real_kube)
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    # The domain's two trays, one free and one serving another domain: the template's
    # selector keeps the scheduler to the domain's own.
    owners = {"gb-r01-t01": str(domain.uid), "gb-r01-t02": str(domain.uid),
              "gb-r01-t03": "", "gb-r01-t04": "another-domains-uid"}  # fmt: skip
    for node, owner in owners.items():
        real_kube.put_node(node, gpu_labels())
        publish_slice(cluster, node, clique="c.1", domain=owner)
    assert tasks.publish_domain(domain.pk) == "created"

    for i in range(2):
        real_kube.apply(pod_with_claim(f"worker-{i}", "team-a", domain.resource_claim_template))

    def bound(name: str) -> dict[str, Any] | None:
        pod = real_kube.get("pods", name, "team-a")
        return pod if pod and pod["spec"].get("nodeName") else None

    pods = [wait_for(lambda i=i: bound(f"worker-{i}"), what=f"worker-{i} to be scheduled")
            for i in range(2)]  # fmt: skip
    # One channel device per tray: the scheduler puts the two pods on the two trays.
    assert {p["spec"]["nodeName"] for p in pods} == {"gb-r01-t01", "gb-r01-t02"}
    for pod in pods:
        claim = claim_of(real_kube, pod)
        assert claim is not None
        node = pod["spec"]["nodeName"]
        assert claim["metadata"]["labels"] == {"portal.domains/domain-uid": str(domain.uid)}
        allocation = claim["status"]["allocation"]
        (result,) = allocation["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (
            DRIVER_NAME, node, DEVICE_NAME,
        )  # fmt: skip
        (config,) = allocation["devices"]["config"]
        assert config["source"] == "FromClaim"
        assert config["opaque"]["parameters"]["domainID"] == str(domain.uid)
        (term,) = allocation["nodeSelector"]["nodeSelectorTerms"]
        assert term["matchFields"][0]["values"] == [node]
        (reserved,) = claim["status"]["reservedFor"]
        assert (reserved["resource"], reserved["name"]) == ("pods", pod["metadata"]["name"])

    # A third pod finds none of the domain's trays free: it stays pending, never put on the
    # free tray or the other domain's, and never half-allocated.
    real_kube.apply(pod_with_claim("worker-2", "team-a", domain.resource_claim_template))

    def unschedulable() -> bool:
        pod = real_kube.get("pods", "worker-2", "team-a") or {}
        conditions = pod.get("status", {}).get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

    wait_for(unschedulable, what="worker-2 to be found unschedulable")
    third = real_kube.get("pods", "worker-2", "team-a")
    assert not third["spec"].get("nodeName")
    claim = claim_of(real_kube, third)
    assert claim is None or not (claim.get("status") or {}).get("allocation")


def test_a_following_domains_pods_never_get_a_tray_its_admission_would_refuse(
    real_kube, cluster, topology, ns_a, tenant_a
):
    install_device_class(real_kube)
    domain = request_and_place(ns_a, tenant_a, name="wl", num_nodes=0)
    clique = topology.cliques.get().label  # the one clique: the domain keeps to it
    # One free tray that may take a member; a cordoned (or draining, down, pending) one and
    # one with a blocking condition, both free but not eligible; one serving another domain.
    trays = {"gb-r01-t01": ("", True), "gb-r01-t02": ("", False), "gb-r01-t03": ("", False),
             "gb-r01-t04": ("another-domains-uid", True)}  # fmt: skip
    for node, (owner, eligible) in trays.items():
        real_kube.put_node(node, gpu_labels())
        publish_slice(cluster, node, clique=clique, domain=owner, eligible=eligible)
    assert tasks.publish_domain(domain.pk) == "created"

    for i in range(2):
        real_kube.apply(pod_with_claim(f"follower-{i}", "team-a", domain.resource_claim_template))

    def placed() -> list[str] | None:
        pods = [real_kube.get("pods", f"follower-{i}", "team-a") or {} for i in range(2)]
        nodes = [p.get("spec", {}).get("nodeName") for p in pods]
        pending = [p for p in pods if not p.get("spec", {}).get("nodeName")]
        unschedulable = [
            p for p in pending
            if any(c["type"] == "PodScheduled" and c["status"] == "False"
                   for c in (p.get("status") or {}).get("conditions") or [])
        ]  # fmt: skip
        return [n for n in nodes if n] if len(unschedulable) == 1 else None

    # One pod takes the one eligible free tray; the other waits rather than take a tray
    # that is cordoned, blocked or another domain's.
    assert wait_for(placed, what="one follower scheduled, one unschedulable") == ["gb-r01-t01"]


def test_a_following_domains_pods_keep_to_its_clique_and_off_held_or_reserved_trays(
    real_kube, cluster, ns_a, tenant_a, operator
):
    """Two cliques, each tray publishing its slice as its agent would: the domain, kept to
    one clique by its placement constraint, has kube-scheduler put its pods only there,
    never on a free, eligible tray of the other clique, on a tray a released domain still
    holds or on one reserved for maintenance. The admission takes every pod it was given."""
    install_device_class(real_kube)
    (rack,) = factories.make_racks("4,8", ip_prefix=factories.tray_ip_prefix(41))
    small, large = (list(c.nodes.order_by("slot")) for c in rack.cliques.order_by("clique_id"))
    label = {t.pk: t.clique.label for t in rack.nodes.select_related("clique")}
    # In the large clique: two trays a released domain still holds, one reserved for
    # maintenance next week; five stay free there, four in the small one.
    old = request_and_place(
        ns_a, tenant_a, name="old", num_nodes=2,
        placement_constraint="clique", placement_target=label[large[0].pk],
    )  # fmt: skip
    held = [m.node for m in old.members.select_related("node")]
    domain_release(actor=Actor.for_user(tenant_a), domain=old)
    reserved = next(t for t in large if t not in held)
    now = timezone.now()
    maintenance_schedule(
        actor=Actor.for_user(operator), starts_at=now + timedelta(days=7),
        ends_at=now + timedelta(days=7, hours=2), reason="PSU swap", trays=[reserved.hostname],
    )  # fmt: skip
    domain = request_domain(
        ns_a, tenant_a, "wl", num_nodes=0,
        placement_constraint="clique", placement_target=label[large[0].pk],
    )  # fmt: skip
    assert list(domain.cliques.values_list("pk", flat=True)) == [large[0].clique_id]
    eligible = {}
    for tray in rack.nodes.select_related("clique"):
        real_kube.put_node(tray.hostname, gpu_labels(), ip=tray.management_ip)
        (device,) = publish_as_its_agent(cluster, tray)["spec"]["devices"]
        eligible[tray.hostname] = device["attributes"]["eligible"]["bool"]
    # The small clique's trays are as eligible as the free ones of the large clique: only
    # the template's clique keeps the pods off them.
    assert {t.hostname for t in small} < {name for name, yes in eligible.items() if yes}
    assert not any(eligible[t.hostname] for t in (*held, reserved))
    assert tasks.publish_domain(domain.pk) == "created"
    free = {t.hostname for t in large if t not in held and t != reserved}
    assert len(free) == 5

    # One pod more than the clique has room for: it waits rather than take a tray the
    # admission would refuse.
    for i in range(6):
        real_kube.apply(pod_with_claim(f"wl-{i}", "team-a", domain.resource_claim_template))

    def settled() -> list[dict[str, Any]] | None:
        pods = [real_kube.get("pods", f"wl-{i}", "team-a") or {} for i in range(6)]
        bound = [p for p in pods if p.get("spec", {}).get("nodeName")]
        waiting = [
            p for p in pods
            if any(c["type"] == "PodScheduled" and c["status"] == "False"
                   for c in (p.get("status") or {}).get("conditions") or [])
        ]  # fmt: skip
        return bound if len(bound) == 5 and len(waiting) == 1 else None

    bound = wait_for(settled, timeout=60, what="five pods scheduled, one unschedulable")
    assert {p["spec"]["nodeName"] for p in bound} == free
    trays = {t.hostname: t for t in rack.nodes.all()}
    for pod in bound:
        claim = claim_of(real_kube, pod)
        assert claim is not None
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        ref = ClaimRef(uid=claim["metadata"]["uid"], namespace="team-a",
                       name=claim["metadata"]["name"])  # fmt: skip
        tray = trays[result["pool"]]
        tray.refresh_from_db()
        assert claim_admit(node=tray, claim=ref, domain_uid=str(domain.uid)).joined
    assert domain.members.filter(active=True).count() == 5


def install_agent_policy(kube: ClusterKube) -> None:
    objects = chart_objects()
    name = "portal-domain-portal-agent"
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        kube.apply(objects[kind, name])
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        kube.apply(objects[kind, f"{name}-resourceslices"])


def as_agent(
    cluster: Cluster, node: str | None, *, pod: str = "agent-x1"
) -> client.CustomObjectsApi:
    """The agent's client as its pod-bound token makes it: the agent's ServiceAccount,
    with the pod's name and the node's in the user's extra (no node: Kubernetes before
    1.32; no pod either: a token bound to no pod)."""
    extra = {POD_EXTRA.replace("/", "%2F"): [pod]} if pod else {}
    if node:
        extra[NODE_EXTRA.replace("/", "%2F")] = [node]
    api = cluster.impersonating(AGENT, groups=("system:serviceaccounts",), extra=extra)
    return client.CustomObjectsApi(api)


def refusal(call: Any, *args: Any, **kwargs: Any) -> str:
    """The API server's message if it refused the call, else ""."""
    try:
        call("resource.k8s.io", "v1", "resourceslices", *args, **kwargs)
    except ApiException as exc:
        assert exc.status in (403, 422), exc.body
        return str(exc.body)
    return ""


def test_the_charts_policy_keeps_each_agent_to_its_own_nodes_slice(real_kube, cluster):
    install_agent_policy(real_kube)
    try:
        own = slice_object(SliceFacts(node="gb-r01-t01", clique="", gpus=4), version="v1",
                           generation=1)  # fmt: skip
        elsewhere = as_agent(cluster, "gb-r01-t02")
        # The policy is loaded a moment after it is created: wait until it bites (dry runs
        # go through admission and store nothing).
        message = wait_for(
            lambda: refusal(elsewhere.create_cluster_custom_object, own, dry_run="All"),
            what="the admission policy to be enforced",
        )
        assert message == refusal(elsewhere.create_cluster_custom_object, own)
        assert "on node 'gb-r01-t02' may only write the ResourceSlice of its own node" in message
        assert "not of 'gb-r01-t01'" in message
        no_node = as_agent(cluster, None)
        assert "names no node" in refusal(no_node.create_cluster_custom_object, own)
        no_pod = as_agent(cluster, None, pod="")  # a user with no extra at all
        assert "names no node" in refusal(no_pod.create_cluster_custom_object, own)
        assert real_kube.get("resourceslices", slice_name("gb-r01-t01")) is None

        mine = as_agent(cluster, "gb-r01-t01")
        assert refusal(mine.create_cluster_custom_object, own) == ""  # its own node
        assert real_kube.get("resourceslices", slice_name("gb-r01-t01")) is not None
        # Another node's slice, published by someone the policy does not match (the admin),
        # can be neither deleted nor changed by that agent; moving it to the agent's node
        # the API server itself refuses (a slice's nodeName is immutable).
        other = publish_slice(cluster, "gb-r01-t03")
        name = other["metadata"]["name"]
        assert "may only write" in refusal(mine.delete_cluster_custom_object, name)
        changed = copy.deepcopy(other)
        changed["spec"]["devices"][0]["attributes"]["gpus"] = {"int": 8}
        assert "may only write" in refusal(mine.replace_cluster_custom_object, name, changed)
        moved = {**other, "spec": {**other["spec"], "nodeName": "gb-r01-t01"}}
        assert "field is immutable" in refusal(mine.replace_cluster_custom_object, name, moved)
        assert real_kube.get("resourceslices", name)["spec"] == other["spec"]
    finally:
        name = "portal-domain-portal-agent"
        rbac = client.RbacAuthorizationV1Api(cluster.api_client())
        for fn in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                fn(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
