"""The Fleet's 24-hour trends come from what the portal recorded: memberships' and domains'
timestamps, read in a fixed number of queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from domains.computedomains.models import ComputeDomain, DomainMember
from domains.computedomains.trends import BUCKETS, P95_BUCKETS, fleet_trends
from testbed import factories
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def test_gpus_in_use_rise_and_fall_with_the_memberships_recorded(tenant_a, ns_a):
    factories.make_racks("18", ip_prefix="127.13")
    now = timezone.now()
    ended = form(request_domain(ns_a, tenant_a, "ended", num_nodes=2))
    DomainMember.objects.filter(domain=ended).update(
        assigned_at=now - timedelta(hours=30),  # before the window: held at its start
        released_at=now - timedelta(hours=12),
        active=False,
    )
    running = form(request_domain(ns_a, tenant_a, "running", num_nodes=3))
    DomainMember.objects.filter(domain=running).update(assigned_at=now - timedelta(hours=6))
    values = fleet_trends(now=now).gpus_used.values
    assert len(values) == BUCKETS
    assert values[0] == 8  # the ended domain's two trays
    assert values[BUCKETS // 2] == 0  # released 12 hours ago, nothing else yet
    assert values[-1] == 12  # the running domain's three trays


def test_the_queue_counts_requests_until_they_are_placed(tenant_a, ns_a):
    factories.make_racks("18", ip_prefix="127.13")
    now = timezone.now()
    waited = form(request_domain(ns_a, tenant_a, "waited", num_nodes=2))
    ComputeDomain.objects.filter(pk=waited.pk).update(
        created_at=now - timedelta(hours=10), placed_at=now - timedelta(hours=4)
    )
    request_domain(ns_a, tenant_a, "large", num_nodes=9)  # awaits approval now
    request_domain(ns_a, tenant_a, "follows", num_nodes=0)  # reserves nothing: never queues
    values = fleet_trends(now=timezone.now()).queue_depth.values
    assert values[0] == 0 and values[30] == 1  # 8.5 hours ago: waiting
    assert values[-2] == 0 and values[-1] == 1


def test_formation_p95_is_per_hour_and_leaves_gaps_where_nothing_formed(tenant_a, ns_a):
    factories.make_racks("18", ip_prefix="127.13")
    now = timezone.now()
    for i, seconds in enumerate((10, 20, 30, 100)):
        domain = form(request_domain(ns_a, tenant_a, f"d{i}", num_nodes=1))
        asked = now - timedelta(hours=2, minutes=30)
        ComputeDomain.objects.filter(pk=domain.pk).update(
            created_at=asked, placed_at=asked, ready_at=asked + timedelta(seconds=seconds)
        )
    with CaptureQueriesContext(connection) as ctx:
        series = fleet_trends(now=now).formation_p95
    assert len(ctx.captured_queries) == 4
    assert len(series.values) == P95_BUCKETS
    assert series.values[-3] == pytest.approx(89.5)  # the 95th percentile of the four
    assert series.values[-1] is None and series.values[0] is None
    assert series.last == pytest.approx(89.5)


def test_formation_is_placement_to_ready_and_the_approval_wait_a_figure_of_its_own(
    tenant_a, ns_a, admin
):
    """A request that waited 14 minutes for an admin formed in 3 s: formation says 3 s (on
    the Fleet page and in /metrics), the approval wait 14 minutes."""
    from domains.audit.events import Actor
    from domains.computedomains import tallies
    from domains.computedomains.services import domain_approve
    from domains.tenancy.models import Quota
    from tests.support.lifecycle import all_ready, place

    factories.make_racks("18", ip_prefix="127.13")
    Quota.objects.filter(namespace=ns_a).update(approval_above_nodes=2)
    domain = request_domain(ns_a, tenant_a, "big", num_nodes=3)
    assert domain.phase == "Pending"
    asked = timezone.now() - timedelta(minutes=14)
    ComputeDomain.objects.filter(pk=domain.pk).update(created_at=asked)
    domain.refresh_from_db()
    domain_approve(actor=Actor.for_user(admin), domain=domain)
    domain = all_ready(place(domain))
    ComputeDomain.objects.filter(pk=domain.pk).update(
        ready_at=domain.placed_at + timedelta(seconds=3)
    )
    trends = fleet_trends(now=timezone.now() + timedelta(seconds=5))
    assert trends.formation_p95.last == pytest.approx(3, abs=0.01)
    assert trends.approval_p95.last == pytest.approx(14 * 60, abs=5)
    _, total = tallies.histograms(tallies.FORMATION)[""]
    assert total < 60  # seconds of formation, not the 14 minutes of waiting
