"""A domain that takes over its released namesake's claim template name gets its own
template as soon as the old one goes, not never.

The new domain's template has the same name as the old one's, which is kept while pods still
hold claims made from it, and so is the old object (the portal's finalizer); the new
domain's publish waits meanwhile. Against upstream's API server."""

from __future__ import annotations

import pytest

from domains.audit.events import Actor
from domains.computedomains.services import domain_release
from domains.kube import tasks
from domains.kube.dra import DOMAIN_UID_LABEL
from domains.kube.models import PublishedDomain
from tests.kube.test_claim_templates import claim_from, template
from tests.support.lifecycle import all_clean, request_and_place

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def test_a_domain_gets_its_template_once_its_released_namesakes_template_is_removed(
    real_kube, eager_celery, django_capture_on_commit_callbacks, topology, ns_a, tenant_a
):
    with django_capture_on_commit_callbacks(execute=True):
        first = request_and_place(ns_a, tenant_a, num_nodes=2)
    claim_from(real_kube, first, "worker-0-channel")  # a pod of the old workload holds it
    with django_capture_on_commit_callbacks(execute=True):
        domain_release(actor=Actor.for_user(tenant_a), domain=first)
        all_clean(first)

    with django_capture_on_commit_callbacks(execute=True):
        second = request_and_place(ns_a, tenant_a, num_nodes=2)  # same name, same template
    assert second.resource_claim_template == first.resource_claim_template
    kept = template(real_kube)
    assert kept is not None and kept["metadata"]["labels"][DOMAIN_UID_LABEL] == str(first.uid)
    # The old object, held by the portal's finalizer until its template goes, keeps the name.
    assert "is still being deleted" in PublishedDomain.objects.get(domain=second).last_error

    real_kube.delete("resourceclaims", "worker-0-channel", "team-a")  # that pod is gone
    tasks.reconcile()  # beat: the old template goes, and the new domain's comes
    mine = template(real_kube)
    assert mine is not None
    assert mine["metadata"]["labels"][DOMAIN_UID_LABEL] == str(second.uid)
    assert PublishedDomain.objects.get(domain=second).last_error == ""
    assert PublishedDomain.objects.get(domain=first).removed
    obj = real_kube.get("computedomains", "train", "team-a")
    assert obj is not None and not obj["metadata"].get("deletionTimestamp")
    assert obj["metadata"]["annotations"]["portal.domains/domain-uid"] == str(second.uid)
