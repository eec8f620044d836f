"""The domain's ResourceClaimTemplate: created with the domain in its namespace, in the
`resource.k8s.io` version the API server speaks, deleted at release once its claims are
gone, and never one that is not the domain's."""

from __future__ import annotations

import pytest

from domains.audit.events import Actor
from domains.kube import tasks
from domains.kube.crd import FINALIZER
from domains.kube.models import PublishedDomain
from nodeagent.dra import DEVICE_CLASS, DRIVER_NAME
from testbed.kube.schemas import assert_valid_dra
from tests.support.lifecycle import all_clean, request_and_place

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[pytest.param("v1", marks=pytest.mark.cluster), "v1beta1"])
def version(request) -> str:
    """v1 as upstream's kube-apiserver 1.34 serves it; v1beta1 (1.32, 1.33) as the mock does."""
    return request.param


@pytest.fixture
def api(request, version):
    if version == "v1":
        return request.getfixturevalue("real_kube")
    kube = request.getfixturevalue("kube")
    kube.resource_version = version
    return kube


def template(kube, name: str = "train-channel") -> dict | None:
    return kube.get("resourceclaimtemplates", name, "team-a")


def test_a_published_domain_gets_its_template_naming_it(api, version, topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    assert tasks.publish_domain(domain.pk) == "created"
    obj = template(api)
    assert_valid_dra(obj)
    assert obj["apiVersion"] == f"resource.k8s.io/{version}"
    devices = obj["spec"]["spec"]["devices"]
    (request,) = devices["requests"]
    klass = request["deviceClassName"] if version == "v1beta1" else request["exactly"]
    assert request["name"] == "channel"
    assert (klass if isinstance(klass, str) else klass["deviceClassName"]) == DEVICE_CLASS
    # The scheduler takes only the trays the placement gave the domain.
    (selector,) = (request if version == "v1beta1" else request["exactly"])["selectors"]
    assert selector["cel"]["expression"] == (
        f'device.attributes["{DRIVER_NAME}"].domain == "{domain.uid}"'
    )
    (config,) = devices["config"]
    assert config["opaque"]["driver"] == DRIVER_NAME
    assert config["opaque"]["parameters"] == {
        "apiVersion": "portal.domains/v1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": str(domain.uid),
        "allocationMode": "Single",
    }
    # Claims made from it carry the domain's uid: that is how its claims are found.
    assert obj["spec"]["metadata"]["labels"] == {"portal.domains/domain-uid": str(domain.uid)}
    assert tasks.publish_domain(domain.pk) == "unchanged"


def claim_from(kube, domain, name: str) -> dict:
    """A ResourceClaim as the control plane makes it from the template for a pod."""
    source = template(kube)
    spec = source["spec"]
    return kube.apply(
        {
            "apiVersion": source["apiVersion"],
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "team-a", **spec["metadata"]},
            "spec": spec["spec"],
        }
    )


@pytest.mark.cluster
def test_release_deletes_the_template_only_once_its_claims_are_gone(
    real_kube, eager_celery, django_capture_on_commit_callbacks, topology, ns_a, tenant_a
):
    from domains.computedomains.services import domain_release

    with django_capture_on_commit_callbacks(execute=True):
        domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    claim_from(real_kube, domain, "worker-0-channel")
    with django_capture_on_commit_callbacks(execute=True):
        domain_release(actor=Actor.for_user(tenant_a), domain=domain)
        all_clean(domain)
    # The object is being deleted, held by the portal's finalizer while a pod still holds a
    # claim made from the template, so a namesake applied now cannot meet the old template.
    held = real_kube.get("computedomains", "train", "team-a")
    assert held is not None and held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["finalizers"] == [FINALIZER]
    assert template(real_kube) is not None
    row = PublishedDomain.objects.get(domain=domain)
    assert not row.removed and "worker-0-channel still exist" in row.last_error

    real_kube.delete("resourceclaims", "worker-0-channel", "team-a")  # the pod is gone
    assert tasks.reconcile()["domains"] == 1
    assert template(real_kube) is None
    assert real_kube.get("computedomains", "train", "team-a") is None  # let go
    assert PublishedDomain.objects.get(domain=domain).removed
    assert tasks.reconcile() == {"domains": 0, "refusals": 0, "claims": 0}


@pytest.mark.cluster
def test_a_template_of_that_name_that_is_not_the_domains_is_left_alone(
    real_kube, topology, ns_a, tenant_a
):
    theirs = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "train-channel", "namespace": "team-a"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
                }
            }
        },
    }
    real_kube.apply(theirs)
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    assert tasks.publish_domain(domain.pk).startswith("refused")
    assert "is not this domain's" in PublishedDomain.objects.get(domain=domain).last_error
    (request,) = template(real_kube)["spec"]["spec"]["devices"]["requests"]
    assert (request["name"], request["exactly"]["deviceClassName"]) == ("gpu", "gpu.example.com")
