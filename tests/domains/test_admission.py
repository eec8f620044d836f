"""Requests: field errors, quota, approval and the dry run, on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import ApprovalState, ComputeDomain, Phase
from domains.computedomains.services import (
    domain_approve,
    domain_deny,
    domain_dry_run,
    domain_release,
    domain_request,
)
from domains.computedomains.specs import DomainSpec
from domains.errors import InvalidInput, InvalidTransition, NameTaken, QuotaExceeded
from domains.inventory.models import Node
from domains.inventory.services import node_cordon
from domains.tenancy.services import quota_set
from testbed import factories

pytestmark = pytest.mark.django_db


def request(ns, user, **spec):
    spec.setdefault("name", "train")
    spec.setdefault("num_nodes", 2)
    return domain_request(actor=Actor.for_user(user), namespace=ns, spec=DomainSpec(**spec))


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        ({"name": "Bad_Name"}, "name", "DNS-1123"),
        ({"name": ""}, "name", "DNS-1123"),
        ({"num_nodes": -1}, "num_nodes", "between 1 and 18"),
        ({"num_nodes": 19}, "num_nodes", "between 1 and 18"),
        ({"num_nodes": "4"}, "num_nodes", "whole number"),
        ({"allocation_mode": "Many"}, "allocation_mode", "Single or All"),
        ({"gpus_per_node": 5}, "gpus_per_node", "between 1 and 4"),
        ({"placement_constraint": "row"}, "placement_constraint", "any, clique, rack"),
        ({"placement_constraint": "rack"}, "placement_target", "name the rack"),
        ({"placement_constraint": "rack", "placement_target": "r9"}, "placement_target", "r9"),
        ({"lifetime": timedelta(0)}, "lifetime", "positive"),
        ({"resource_claim_template": "No Way"}, "resource_claim_template", "subdomain"),
        ({"labels": {"k": 1}}, "labels", "strings"),
    ],
)
def test_bad_input_names_the_field_and_creates_nothing(topology, ns_a, tenant_a, spec, field, text):
    with pytest.raises(InvalidInput) as exc:
        request(ns_a, tenant_a, **spec)
    assert exc.value.field == field
    assert text in exc.value.message
    assert not ComputeDomain.objects.exists()
    assert not Event.objects.exists()


def test_a_live_name_is_taken_until_the_domain_has_ended(topology, ns_a, tenant_a):
    first = request(ns_a, tenant_a)
    with pytest.raises(NameTaken) as exc:
        request(ns_a, tenant_a)
    assert exc.value.field == "name"
    domain_release(actor=Actor.for_user(tenant_a), domain=first)
    assert request(ns_a, tenant_a).phase == Phase.ADMITTED


def test_defaults_are_filled_in(topology, ns_a, tenant_a, settings):
    domain = request(ns_a, tenant_a)
    assert domain.resource_claim_template == "train-channel"
    assert domain.gpus_per_node == 4
    assert domain.lifetime == settings.PORTAL["DEFAULT_LIFETIME"]
    assert domain.requested_by == tenant_a
    assert domain.reason == "Queued"


def test_it_rejects_a_request_over_quota(topology, ns_a, tenant_a):
    # team-a: 12 trays, 48 GPUs, 4 domains, 12 trays per domain.
    request(ns_a, tenant_a, name="one", num_nodes=8)
    with pytest.raises(QuotaExceeded) as exc:
        request(ns_a, tenant_a, name="two", num_nodes=5)
    assert "trays: 8 in use + 5 requested exceeds the quota of 12" in exc.value.message
    assert ComputeDomain.objects.count() == 1
    with pytest.raises(QuotaExceeded) as exc:
        request(ns_a, tenant_a, name="big", num_nodes=13)
    assert exc.value.field == "num_nodes"


def test_the_domain_count_and_lifetime_are_limited_too(topology, ns_a, tenant_a, admin):
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, max_lifetime=timedelta(hours=8))
    with pytest.raises(QuotaExceeded) as exc:
        request(ns_a, tenant_a, lifetime=timedelta(hours=9))
    assert exc.value.field == "lifetime"
    assert request(ns_a, tenant_a).lifetime == timedelta(hours=8)  # default capped
    for n in range(3):
        request(ns_a, tenant_a, name=f"d{n}", num_nodes=1)
    with pytest.raises(QuotaExceeded, match="domains: 4 in use"):
        request(ns_a, tenant_a, name="fifth", num_nodes=1)


def test_released_domains_no_longer_count_against_quota(topology, ns_a, tenant_a):
    domain = request(ns_a, tenant_a, num_nodes=12)
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    assert request(ns_a, tenant_a, name="again", num_nodes=12).phase == Phase.ADMITTED


def test_a_large_request_waits_for_an_admin(topology, ns_a, tenant_a, admin):
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=4)
    small = request(ns_a, tenant_a, name="small", num_nodes=4)
    big = request(ns_a, tenant_a, name="big", num_nodes=8)
    assert small.phase == Phase.ADMITTED
    assert (big.phase, big.approval_state, big.reason) == (
        Phase.PENDING,
        ApprovalState.PENDING,
        "AwaitingApproval",
    )
    approved = domain_approve(actor=Actor.for_user(admin), domain=big)
    assert (approved.phase, approved.approved_by) == (Phase.ADMITTED, admin)
    with pytest.raises(InvalidTransition):
        domain_approve(actor=Actor.for_user(admin), domain=big)


def test_a_denied_request_ends_and_frees_its_quota(topology, ns_a, tenant_a, admin):
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=4)
    big = request(ns_a, tenant_a, name="big", num_nodes=12)
    denied = domain_deny(actor=Actor.for_user(admin), domain=big, reason="not this week")
    assert (denied.phase, denied.reason) == (Phase.FAILED, "Denied")
    assert denied.message == "denied by admin: not this week"
    assert request(ns_a, tenant_a, name="big", num_nodes=4).phase == Phase.ADMITTED


def test_a_dry_run_says_where_it_lands_and_creates_nothing(topology, ns_a, tenant_a):
    result = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="try", num_nodes=4))
    assert result.placeable and result.quota_ok and not result.needs_approval
    assert result.nodes == ["gb-r01-t01", "gb-r01-t02", "gb-r01-t03", "gb-r01-t04"]
    assert result.message == (
        "would be placed on 4 trays in rack gb-r01 clique gb-r01-c0 (18 free before)"
    )
    assert result.quota_impact["gpus"] == {
        "used": 0,
        "reserved": 0,
        "requested": 16,
        "limit": 48,
    }
    assert not ComputeDomain.objects.exists()


def test_a_dry_run_explains_what_does_not_fit(ns_a, operator):
    (rack,) = factories.make_racks("9,9", ip_prefix="127.11")
    for node in Node.objects.filter(rack=rack, slot__in=[1, 2, 3, 10, 11, 12, 13]):
        node_cordon(actor=Actor.for_user(operator), node=node, reason="maintenance")
    result = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="try", num_nodes=7))
    assert not result.placeable
    assert result.reasons == [
        "needs 7 free trays in one clique; best is rack gb-r01 clique gb-r01-c0 with 6 free",
        "gb-r01-c0: 6 free, 3 cordoned (gb-r01-t01, gb-r01-t02, gb-r01-t03)",
        # It would fit over both cliques (one IMEX ensemble each), if asked to span them.
        "spanning 2 cliques it would fit now (ask for 2 cliques or racks)",
    ]
    assert result.message == result.reasons[0]


def test_a_dry_run_reports_quota_problems(topology, ns_b, tenant_b):
    request(ns_b, tenant_b, name="one", num_nodes=4)
    result = domain_dry_run(namespace=ns_b, spec=DomainSpec(name="two", num_nodes=4))
    assert result.placeable and not result.quota_ok
    assert result.quota_problems[0] == "GPUs: 16 in use + 16 requested exceeds the quota of 24"
    assert result.message.startswith("fits the fabric, but is over quota")


def test_a_portal_admins_own_large_request_needs_no_approval(topology, ns_a, admin):
    quota_set(actor=Actor.for_user(admin), namespace=ns_a, approval_above_nodes=4)
    dry = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="x", num_nodes=8), requested_by=admin)
    assert dry.placeable and not dry.needs_approval and "approval" not in dry.message
    domain = request(ns_a, admin, num_nodes=8)
    assert (domain.phase, domain.approval_state) == (Phase.ADMITTED, ApprovalState.NOT_REQUIRED)
