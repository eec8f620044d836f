"""Blast radius: what losing a tray, a set of trays, a clique, a rack, an NVLink switch tray
or a power shelf does to the live domains, by the real services."""

from __future__ import annotations

import pytest

from domains.audit.events import Actor
from domains.computedomains.services import domain_release
from domains.errors import InvalidInput, NotFound
from domains.foresight.blast import (
    BANDWIDTH,
    DOWN,
    REDUNDANCY,
    blast_radius,
    blast_radius_for,
    scope_named,
    trays_scope,
)
from domains.inventory.models import Node, PartState, PowerShelf, SwitchTray
from testbed import factories
from tests.support.lifecycle import form, request_and_place, request_domain

pytestmark = pytest.mark.django_db


def hosts(domain) -> list[str]:
    return list(domain.members.order_by("index").values_list("node__hostname", flat=True))


def test_a_tray_takes_down_the_domain_holding_it_and_names_the_tenant(topology, ns_a, tenant_a):
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=3))
    radius = blast_radius(scope_named("tray", hosts(domain)[1]))
    assert radius.hit == DOWN
    assert radius.trays_down == (hosts(domain)[1],)
    assert radius.gpus_down == 4
    (hit,) = radius.domains
    assert (hit.namespace, hit.name, hit.phase) == ("team-a", "train", "Ready")
    assert hit.trays == (hosts(domain)[1],) and hit.trays_total == 3 and hit.gpus == 4
    assert hit.effect == "loses 1 of 3 trays (4 GPUs)"
    assert radius.tenants == ("team-a",)
    assert "1 live domain, in 1 namespace," in radius.summary


def test_a_free_tray_hits_nobody(topology, ns_a, tenant_a):
    form(request_domain(ns_a, tenant_a, num_nodes=2))
    free = Node.objects.filter(memberships__isnull=True).order_by("slot").first()
    radius = blast_radius(scope_named("tray", free.hostname))
    assert radius.harmless and radius.gpus_down == 4
    assert radius.summary == "1 tray stops; no live domain runs there"


def test_a_set_of_trays_adds_up_per_domain(topology, ns_a, tenant_a, ns_b, tenant_b):
    a = form(request_domain(ns_a, tenant_a, "a", num_nodes=4))
    b = form(request_domain(ns_b, tenant_b, "b", num_nodes=2))
    chosen = Node.objects.filter(hostname__in=hosts(a)[:2] + hosts(b)[:1])
    radius = blast_radius(trays_scope(chosen))
    assert radius.scope.kind == "trays" and len(radius.trays_down) == 3
    by_name = {d.name: d for d in radius.domains}
    assert by_name["a"].effect == "loses 2 of 4 trays (8 GPUs)"
    assert by_name["b"].effect == "loses 1 of 2 trays (4 GPUs)"
    assert radius.tenants == ("team-a", "team-b") and radius.gpus_hit == 12


def test_a_clique_and_a_rack_take_every_domain_on_them(db, ns_a, tenant_a):
    factories.make_racks("9,9")
    domain = form(request_domain(ns_a, tenant_a, num_nodes=9, placement_constraint="clique",
                                 placement_target="gb-r01-c1"))  # fmt: skip
    clique = domain.members.first().clique
    radius = blast_radius(scope_named("clique", clique.label))
    assert len(radius.trays_down) == 9 and radius.domains[0].effect == "loses all 9 trays (36 GPUs)"
    other = blast_radius(scope_named("clique", "gb-r01-c0"))  # by operator's name too
    assert other.harmless and len(other.trays_down) == 9
    rack = blast_radius(scope_named("rack", "gb-r01"))
    assert len(rack.trays_down) == 18 and rack.gpus_down == 72 and len(rack.domains) == 1


def test_queued_and_ended_domains_are_not_hit(topology, ns_a, tenant_a):
    ended = form(request_domain(ns_a, tenant_a, "ended", num_nodes=10))
    domain_release(actor=Actor.for_user(tenant_a), domain=ended)  # Releasing: going anyway
    Node.objects.filter(memberships__isnull=True).update(state="cordoned")
    queued = request_and_place(ns_a, tenant_a, "queued", num_nodes=2)
    assert queued.phase == "Admitted"
    assert blast_radius(scope_named("rack", "gb-r01")).domains == ()


def test_a_switch_tray_slows_every_domain_of_the_rack(db, ns_a, tenant_a, ns_b, tenant_b):
    factories.make_racks("9,9")
    form(request_domain(ns_a, tenant_a, "a", num_nodes=3))
    form(request_domain(ns_b, tenant_b, "b", num_nodes=5, placement_constraint="clique",
                        placement_target="gb-r01-c1"))  # fmt: skip
    radius = blast_radius(scope_named("switch_tray", "gb-r01-s04"))
    assert radius.hit == BANDWIDTH and radius.trays_down == ()
    assert radius.bandwidth_loss == pytest.approx(1 / 9)
    assert {d.name for d in radius.domains} == {"a", "b"}  # both cliques run over it
    assert "loses 11% of its NVLink bandwidth (1 of 9 switch trays out)" in radius.summary
    SwitchTray.objects.exclude(name__in=["gb-r01-s04", "gb-r01-s05"]).update(state=PartState.DOWN)
    assert blast_radius(scope_named("switch_tray", "gb-r01-s04")).bandwidth_loss == pytest.approx(
        8 / 9
    )
    SwitchTray.objects.filter(name="gb-r01-s05").update(state=PartState.DOWN)
    last = blast_radius(scope_named("switch_tray", "gb-r01-s04"))
    assert last.hit == DOWN and len(last.trays_down) == 18
    assert "no NVLink switch tray would be left" in last.summary


def test_a_power_shelf_only_costs_redundancy_until_the_busbar_runs_short(topology, ns_a, tenant_a):
    form(request_domain(ns_a, tenant_a, num_nodes=2))
    radius = blast_radius(scope_named("power_shelf", "gb-r01-p3"))
    # 18 trays of 5.4 kW + 9 of 0.4 kW = 100.8 kW; 7 shelves of 33 kW = 231 kW left.
    assert radius.hit == REDUNDANCY and radius.harmless
    assert radius.power.load_watts == 100_800 and radius.power.capacity_after_watts == 231_000
    assert radius.power.spare_shelves == 3
    assert radius.summary.startswith("no tray stops: 7 of 8 shelves carry 231.0 kW")
    PowerShelf.objects.filter(position__in=[1, 2, 4, 5]).update(state=PartState.DOWN)
    short = blast_radius(scope_named("power_shelf", "gb-r01-p3"))
    assert short.hit == DOWN and not short.power.carried
    assert len(short.trays_down) == 18 and len(short.domains) == 1


def test_tenants_see_their_own_domains_by_name_and_others_only_as_counts(
    topology, ns_a, tenant_a, ns_b, tenant_b, operator
):
    form(request_domain(ns_a, tenant_a, "a", num_nodes=2))
    form(request_domain(ns_b, tenant_b, "b", num_nodes=3))
    scope = scope_named("rack", "gb-r01")
    seen_by_a = blast_radius_for(tenant_a, scope)
    assert [d.name for d in seen_by_a.domains] == ["a"] and seen_by_a.tenants == ("team-a",)
    assert (seen_by_a.hidden_trays, seen_by_a.hidden_gpus) == (3, 12)
    assert seen_by_a.gpus_hit == 8
    everything = blast_radius_for(operator, scope)
    assert {d.name for d in everything.domains} == {"a", "b"} and everything.hidden_trays == 0


def test_unknown_parts_and_kinds_name_the_field(topology):
    with pytest.raises(NotFound) as missing:
        scope_named("switch_tray", "nope")
    assert missing.value.field == "name"
    with pytest.raises(InvalidInput) as bad:
        scope_named("toaster", "x")
    assert bad.value.field == "kind"


def test_every_scope_costs_a_constant_number_of_queries(
    db, ns_a, tenant_a, django_assert_max_num_queries
):
    factories.make_racks("18", "18")
    for i in range(4):
        form(request_domain(ns_a, tenant_a, f"d{i}", num_nodes=3))
    for kind, name in [("rack", "gb-r01"), ("switch_tray", "gb-r01-s01"),
                       ("power_shelf", "gb-r01-p1"), ("tray", "gb-r01-t01")]:  # fmt: skip
        with django_assert_max_num_queries(6):
            blast_radius(scope_named(kind, name))
