"""Placement estimates from the database: stored per waiting domain, shown in the API
status, the dry run and the pages, with a reason when no time can be given."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain
from domains.computedomains.services import domain_dry_run, domain_release
from domains.computedomains.specs import DomainSpec
from domains.foresight.estimates import estimates_refresh
from domains.foresight.models import PlacementEstimate
from domains.tenancy.models import Quota
from tests.api.conftest import bearer_client
from tests.support.lifecycle import all_clean, form, place, request_and_place, request_domain

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)
DEADLINE = timedelta(seconds=300)  # PORTAL_FORMATION_DEADLINE_S default


@pytest.fixture
def busy(topology, ns_a, tenant_a, ns_b, tenant_b):
    """The rack full: 12 trays until their lease ends in ~2 h, 6 in ~5 h (no quotas)."""
    Quota.objects.update(max_gpus=None, max_nodes=None, max_domains=None,
                         max_nodes_per_domain=None)  # fmt: skip
    a = form(request_domain(ns_a, tenant_a, "a", num_nodes=12, lifetime=2 * HOUR))
    b = form(request_domain(ns_b, tenant_b, "b", num_nodes=6, lifetime=5 * HOUR))
    return a, b


def test_a_queued_domain_is_estimated_at_the_lease_end_that_frees_its_trays(busy, ns_b, tenant_b):
    a, _ = busy
    queued = request_and_place(ns_b, tenant_b, "next", num_nodes=4, lifetime=HOUR)
    assert queued.phase == "Admitted"
    assert estimates_refresh() == 1
    estimate = PlacementEstimate.objects.get(domain=queued)
    assert estimate.reason == "Estimated"
    assert abs(estimate.estimated_at - a.lease_expires_at) < timedelta(seconds=1)


def test_the_api_status_carries_the_estimate_and_its_reason(busy, ns_a, tenant_a):
    never = request_and_place(ns_a, tenant_a, "never", num_nodes=12, placement_constraint="rack",
                              placement_target="gb-r01")  # fmt: skip
    ComputeDomain.objects.filter(pk=never.pk).update(num_nodes=19)  # as if the rack shrank
    estimates_refresh()
    client = bearer_client(tenant_a)
    status = client.get("/api/v1/namespaces/team-a/computedomains/never").json()["status"]
    assert status["estimatedPlacementAt"] is None and status["estimateReason"] == "NeverFits"
    assert "has only 18 trays" in status["estimateMessage"]
    ready = client.get("/api/v1/namespaces/team-a/computedomains/a").json()["status"]
    assert ready["estimatedPlacementAt"] is None and ready["estimateReason"] == ""


def test_no_estimate_when_the_trays_ahead_are_held_without_a_lease_end(topology, ns_a, tenant_a):
    ComputeDomain.objects.all()
    Quota.objects.update(max_gpus=None, max_nodes=None, max_nodes_per_domain=None)
    forever = form(request_domain(ns_a, tenant_a, "forever", num_nodes=12))
    ComputeDomain.objects.filter(pk=forever.pk).update(lifetime=None, lease_expires_at=None)
    queued = request_and_place(ns_a, tenant_a, "big", num_nodes=8)
    estimates_refresh()
    estimate = PlacementEstimate.objects.get(domain=queued)
    assert (estimate.estimated_at, estimate.reason) == (None, "NoLeaseEnds")


def test_estimates_follow_the_queue_and_leave_when_a_domain_is_placed(busy, ns_b, tenant_b):
    a, _ = busy
    queued = request_and_place(ns_b, tenant_b, "next", num_nodes=4, lifetime=HOUR)
    estimates_refresh()
    domain_release(actor=Actor.for_user(a.requested_by), domain=a)
    all_clean(a)
    estimates_refresh()
    assert PlacementEstimate.objects.get(domain=queued).reason == "FitsNow"
    assert place(queued).phase == "Forming"
    estimates_refresh()
    assert not PlacementEstimate.objects.exists()


def test_the_dry_run_estimates_a_request_not_made_yet(busy, ns_b, tenant_b):
    _, b = busy
    result = domain_dry_run(namespace=ns_b, spec=DomainSpec(name="x", num_nodes=14, lifetime=HOUR))
    assert not result.placeable and result.estimate_reason == "Estimated"
    assert abs(result.estimated_placement_at - b.lease_expires_at) < timedelta(seconds=1)
    fits = domain_dry_run(namespace=ns_b, spec=DomainSpec(name="y", num_nodes=1))
    assert not fits.placeable  # the rack is full, but a 1-tray domain is next in line
    assert fits.estimate_reason == "Estimated"
    assert abs(fits.estimated_placement_at - busy[0].lease_expires_at) < timedelta(seconds=1)


def test_pages_show_the_estimate(client, busy, ns_b, tenant_b):
    queued = request_and_place(ns_b, tenant_b, "next", num_nodes=4, lifetime=HOUR)
    estimates_refresh()
    client.force_login(tenant_b)
    page = client.get(reverse("tenant:domain", args=["team-b", queued.uid])).content.decode()
    assert 'id="domain-estimate"' in page and 'data-estimate="Estimated"' in page
    dashboard = client.get(reverse("tenant:dashboard", args=["team-b"])).content.decode()
    assert "placed ~" in dashboard
    preview = client.post(
        reverse("tenant:preview", args=["team-b"]),
        {"name": "more", "num_nodes": 2, "allocation_mode": "Single",
         "placement_constraint": "any"},
    ).content.decode()  # fmt: skip
    assert 'class="estimate-note" data-estimate="Estimated"' in preview


def test_lists_read_estimates_in_constant_queries(client, busy, ns_b, tenant_b, operator):
    client.force_login(operator)
    url = reverse("operator:domains")
    request_and_place(ns_b, tenant_b, "q1", num_nodes=4, lifetime=HOUR)
    estimates_refresh()

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    one = count()
    for i in range(3):
        request_and_place(ns_b, tenant_b, f"q{i + 2}", num_nodes=4, lifetime=HOUR)
    estimates_refresh()
    assert count() == one
