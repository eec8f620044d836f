"""Maintenance windows: placement keeps new domains off trays whose window starts before
the lease would end, leases are not extended into one, and the domains already there are
listed with their tenants, who are told in their timeline."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.services import domain_dry_run, domain_extend_lease
from domains.computedomains.specs import DomainSpec
from domains.errors import InvalidInput, InvalidTransition, MaintenanceConflict
from domains.foresight.maintenance import (
    affected_domains,
    maintenance_cancel,
    maintenance_schedule,
    window_views,
)
from domains.inventory.models import MaintenanceWindow
from testbed import factories
from tests.support.lifecycle import form, place, request_and_place, request_domain

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def schedule(operator, start_in=HOUR, length=2 * HOUR, **scope):
    now = timezone.now()
    return maintenance_schedule(
        actor=Actor.for_user(operator),
        starts_at=now + start_in,
        ends_at=now + start_in + length,
        reason="replace NVLink cable cartridge",
        **scope,
    )


def test_placement_avoids_trays_whose_window_starts_before_the_lease_ends(
    db, ns_a, tenant_a, operator
):
    factories.make_racks("9,9")
    schedule(operator, clique="gb-r01-c0")  # best fit would pick c0 first (topology order)
    domain = request_and_place(ns_a, tenant_a, "train", num_nodes=4, lifetime=4 * HOUR)
    assert domain.phase == "Forming"
    assert set(domain.members.values_list("clique__name", flat=True)) == {"gb-r01-c1"}


def test_a_lease_that_ends_before_the_window_may_use_its_trays(db, ns_a, tenant_a, operator):
    factories.make_racks("9")
    schedule(operator, start_in=10 * HOUR, clique="gb-r01-c0")
    short = request_and_place(ns_a, tenant_a, "short", num_nodes=2, lifetime=2 * HOUR)
    assert short.phase == "Forming"
    long = request_and_place(ns_a, tenant_a, "long", num_nodes=2, lifetime=24 * HOUR)
    assert long.phase == "Admitted" and long.reason == "Unschedulable"
    assert "maintenance before the lease would end" in long.message


def test_the_dry_run_says_which_window_its_lease_would_reach_into(topology, ns_a, operator):
    schedule(operator, trays=["gb-r01-t01", "gb-r01-t02"])
    result = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="x", num_nodes=16))
    assert result.placeable and "gb-r01-t01" not in result.nodes
    (note,) = result.maintenance
    assert "maintenance of trays gb-r01-t01, gb-r01-t02 from" in note
    assert "replace NVLink cable cartridge" in note and "its trays are left out" in note
    over = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="x", num_nodes=17))
    assert not over.placeable and "2 with maintenance before the lease would end" in (
        " ".join(over.reasons)
    )


def test_domains_already_there_are_listed_and_told(
    topology, ns_a, tenant_a, ns_b, tenant_b, operator
):
    a = form(request_domain(ns_a, tenant_a, "a", num_nodes=3, lifetime=24 * HOUR))
    form(request_domain(ns_b, tenant_b, "b", num_nodes=2, lifetime=24 * HOUR))
    window = schedule(operator, rack="gb-r01")
    assert {d.name for d in affected_domains(window)} == {"a", "b"}
    told = Event.objects.get(verb="domain.maintenance_scheduled", domain=a)
    assert told.namespace == ns_a and "replace NVLink cable cartridge" in told.message
    assert told.details["window"] == window.pk and len(told.details["trays"]) == 3
    (seen_by_a,) = window_views(tenant_a, [window])
    assert [d.name for d in seen_by_a.domains] == ["a"] and seen_by_a.hidden_domains == 1
    (seen_by_op,) = window_views(operator, [window])
    assert seen_by_op.tenants == ["team-a", "team-b"]


def test_a_domain_whose_lease_ends_first_is_not_affected(topology, ns_a, tenant_a, operator):
    form(request_domain(ns_a, tenant_a, "brief", num_nodes=2, lifetime=HOUR))
    window = schedule(operator, start_in=5 * HOUR, rack="gb-r01")
    assert affected_domains(window) == []
    assert not Event.objects.filter(verb="domain.maintenance_scheduled").exists()


def test_a_lease_is_not_extended_into_a_window(topology, ns_a, tenant_a, operator):
    domain = form(request_domain(ns_a, tenant_a, "a", num_nodes=2, lifetime=4 * HOUR))
    trays = list(domain.members.values_list("node__hostname", flat=True))
    schedule(operator, start_in=6 * HOUR, trays=trays[:1])
    actor = Actor.for_user(tenant_a)
    domain_extend_lease(actor=actor, domain=domain, by=HOUR)  # ends at 5 h: still clear
    with pytest.raises(MaintenanceConflict) as refused:
        domain_extend_lease(actor=actor, domain=domain, by=2 * HOUR)
    assert refused.value.field == "by" and refused.value.code == "maintenance_conflict"
    assert "replace NVLink cable cartridge" in refused.value.message
    domain.refresh_from_db()
    assert domain.lease_expires_at < timezone.now() + 6 * HOUR


def test_cancelling_frees_the_trays_and_tells_the_tenants(topology, ns_a, tenant_a, operator):
    domain = form(request_domain(ns_a, tenant_a, "a", num_nodes=2, lifetime=24 * HOUR))
    window = schedule(operator, rack="gb-r01")
    queued = request_and_place(ns_a, tenant_a, "later", num_nodes=2)
    assert queued.phase == "Admitted"
    maintenance_cancel(actor=Actor.for_user(operator), window=window)
    assert Event.objects.filter(verb="domain.maintenance_cancelled", domain=domain).exists()
    with pytest.raises(InvalidTransition):
        maintenance_cancel(actor=Actor.for_user(operator), window=window)
    assert place(queued).phase == "Forming"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rack": "gb-r01", "reason": ""}, "reason"),
        ({"rack": "nope"}, "rack"),
        ({"clique": "nope"}, "clique"),
        ({"trays": ["gb-r01-t01", "ghost"]}, "trays"),
        ({}, "trays"),
        ({"rack": "gb-r01", "clique": "gb-r01-c0"}, "trays"),
        ({"rack": "gb-r01", "length": -HOUR}, "ends_at"),
        ({"rack": "gb-r01", "start_in": -5 * HOUR}, "ends_at"),
    ],
)
def test_bad_windows_name_the_field_and_create_nothing(topology, operator, kwargs, field):
    reason = kwargs.pop("reason", "fan swap")
    start_in, length = kwargs.pop("start_in", HOUR), kwargs.pop("length", HOUR)
    now = timezone.now()
    with pytest.raises(InvalidInput) as bad:
        maintenance_schedule(
            actor=Actor.for_user(operator),
            starts_at=now + start_in,
            ends_at=now + start_in + length,
            reason=reason,
            **kwargs,
        )
    assert bad.value.field == field
    assert not MaintenanceWindow.objects.exists() and not Event.objects.exists()
