"""A ComputeDomain adopted whichever watch hears first: its own or its namespace's; and one
applied again while its namesake releases, adopted once that ends.

`kubectl create namespace x && kubectl apply -n x -f computedomain.yaml` makes both objects
within milliseconds, and kube_sync watches Namespaces and ComputeDomains in separate
threads; at its start it lists them in parallel too. Run against upstream's API server,
the watchers stepped one at a time in the unkind order.
"""

from __future__ import annotations

import pytest

from domains.computedomains.models import LIVE_PHASES, ComputeDomain, DomainSource, Phase
from domains.kube.crd import FINALIZER, UID_ANNOTATION
from domains.kube.models import RefusedComputeDomain
from domains.tenancy.models import Namespace
from testbed.kube.objects import computedomain
from tests.support.lifecycle import all_clean

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def test_a_computedomain_heard_of_before_its_new_namespace_is_adopted_at_once(
    real_kube, real_sync, topology
):
    real_sync.step()  # every watcher has listed: kube_sync is running
    real_kube.put_namespace("fresh-tenant")  # kubectl create namespace
    real_kube.apply(computedomain("train", "fresh-tenant", num_nodes=2))  # kubectl apply

    real_sync.step("computedomains")  # its watch event comes before the namespace's
    domain = ComputeDomain.objects.get(namespace__name="fresh-tenant", name="train")
    assert domain.source == DomainSource.KUBERNETES
    assert Namespace.objects.get(name="fresh-tenant").active
    assert not RefusedComputeDomain.objects.exists()
    obj = real_kube.get("computedomains", "train", "fresh-tenant")
    assert obj is not None
    assert obj["metadata"]["annotations"][UID_ANNOTATION] == str(domain.uid)

    real_sync.step("namespaces")  # the namespace's own event changes nothing
    assert ComputeDomain.objects.filter(name="train").count() == 1


def test_a_computedomain_in_a_namespace_that_is_not_a_tenant_is_still_refused(
    real_kube, real_sync, topology, settings
):
    settings.PORTAL = {**settings.PORTAL, "KUBE_NAMESPACE_LABEL": "portal.domains/tenant"}
    real_sync.step()
    real_kube.put_namespace("not-a-tenant")  # no tenant label
    real_kube.apply(computedomain("train", "not-a-tenant", num_nodes=2))
    real_sync.step("computedomains")
    assert not ComputeDomain.objects.filter(name="train").exists()
    assert not Namespace.objects.filter(name="not-a-tenant").exists()
    refusal = RefusedComputeDomain.objects.get(name="train")
    assert "not a tenant" in refusal.message


def test_a_computedomain_applied_again_while_its_namesake_releases_is_adopted_once_it_ends(
    real_kube, real_sync, topology, ns_a, django_capture_on_commit_callbacks
):
    """The portal's finalizer holds a deleted object until its domain ended; an operator who
    lifts it by hand and applies the object again while the old domain still releases gets
    the new object refused for its name, and adopted as soon as that domain ends, not at
    the next resync minutes later."""
    real_sync.step()
    real_kube.apply(computedomain("train", "team-a", num_nodes=2))
    real_sync.step("computedomains")
    first = ComputeDomain.objects.get(namespace=ns_a, name="train")
    assert first.phase == Phase.FORMING

    real_kube.delete("computedomains", "train", "team-a")
    real_sync.step("computedomains")
    first.refresh_from_db()
    assert first.phase == Phase.RELEASING  # its trays are still being cleaned
    held = real_kube.get("computedomains", "train", "team-a")
    assert held is not None and held["metadata"]["finalizers"] == [FINALIZER]
    real_kube.resource("computedomains").patch(  # kubectl patch … finalizers: null
        name="train",
        namespace="team-a",
        body={"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    assert real_kube.get("computedomains", "train", "team-a") is None
    real_kube.apply(computedomain("train", "team-a", num_nodes=2))
    real_sync.step("computedomains")
    assert RefusedComputeDomain.objects.get(name="train").reason == "NameTaken"

    with django_capture_on_commit_callbacks(execute=True):
        all_clean(first)  # the old domain's trays report clean: it ends
    first.refresh_from_db()
    assert first.phase == Phase.RELEASED
    second = ComputeDomain.objects.get(namespace=ns_a, name="train", phase__in=LIVE_PHASES)
    assert second.source == DomainSource.KUBERNETES
    assert not RefusedComputeDomain.objects.exists()
    obj = real_kube.get("computedomains", "train", "team-a")
    assert obj is not None
    annotations = obj["metadata"]["annotations"]
    assert annotations[UID_ANNOTATION] == str(second.uid)
    assert annotations["portal.domains/phase"] != "Refused"
