"""The database itself refuses the bad states (the invariants in docs/architecture.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DataError, IntegrityError, transaction

from domains.computedomains.models import ChannelAllocation, ComputeDomain, DomainMember, Phase
from domains.inventory.models import Clique, Node
from domains.tenancy.models import Namespace, Quota

pytestmark = pytest.mark.django_db


def make_domain(ns: Namespace, name: str = "train", **kw: object) -> ComputeDomain:
    fields = {"num_nodes": 2, "resource_claim_template": f"{name}-channel", **kw}
    return ComputeDomain.objects.create(namespace=ns, name=name, **fields)


def add_member(domain: ComputeDomain, node: Node, index: int, **kw: object) -> DomainMember:
    return DomainMember.objects.create(
        domain=domain,
        node=node,
        index=index,
        clique=node.clique,
        ip_address=node.management_ip,
        **kw,
    )


def refuses(fn) -> bool:
    try:
        with transaction.atomic():
            fn()
    except (IntegrityError, DataError):
        return True
    return False


def test_a_node_cannot_be_in_two_live_domains(ns_a, topology):
    node = topology.nodes.first()
    add_member(make_domain(ns_a, "one"), node, 0)
    assert refuses(lambda: add_member(make_domain(ns_a, "two"), node, 0))


def test_a_node_can_join_a_new_domain_once_the_old_membership_ended(ns_a, topology):
    node = topology.nodes.first()
    add_member(make_domain(ns_a, "one"), node, 0, active=False)
    add_member(make_domain(ns_a, "two"), node, 0)
    assert DomainMember.objects.filter(node=node, active=True).count() == 1


def test_member_indexes_are_unique_within_a_domain(ns_a, topology):
    first, second = topology.nodes.all()[:2]
    domain = make_domain(ns_a)
    add_member(domain, first, 0)
    assert refuses(lambda: add_member(domain, second, 0))


def test_a_channel_is_allocated_once_per_clique_at_a_time(ns_a, topology):
    clique = Clique.objects.get(rack=topology)
    one, two = make_domain(ns_a, "one"), make_domain(ns_a, "two")
    ChannelAllocation.objects.create(clique=clique, channel=1, domain=one)
    assert refuses(lambda: ChannelAllocation.objects.create(clique=clique, channel=1, domain=two))


def test_a_released_channel_can_be_allocated_again(ns_a, topology):
    from django.utils import timezone

    clique = Clique.objects.get(rack=topology)
    one, two = make_domain(ns_a, "one"), make_domain(ns_a, "two")
    ChannelAllocation.objects.create(
        clique=clique, channel=1, domain=one, released_at=timezone.now()
    )
    ChannelAllocation.objects.create(clique=clique, channel=1, domain=two)


def test_channel_zero_is_reserved(ns_a, topology):
    clique = Clique.objects.get(rack=topology)
    domain = make_domain(ns_a)
    assert refuses(
        lambda: ChannelAllocation.objects.create(clique=clique, channel=0, domain=domain)
    )


@pytest.mark.parametrize("name", ["Train", "-train", "train-", "tr_ain", "a" * 64, ""])
def test_domain_names_must_be_dns1123_labels(ns_a, name):
    assert refuses(lambda: make_domain(ns_a, name))


def test_domain_names_are_unique_per_namespace_while_live(ns_a, ns_b):
    make_domain(ns_a, "train")
    make_domain(ns_b, "train")  # another namespace may use the same name
    assert refuses(lambda: make_domain(ns_a, "train"))


def test_a_domain_name_is_reusable_once_released(ns_a):
    make_domain(ns_a, "train", phase=Phase.RELEASED)
    make_domain(ns_a, "train")


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_gpus", -1),
        ("max_nodes", -1),
        ("max_domains", -1),
        ("max_nodes_per_domain", -1),
        ("max_lifetime", timedelta(hours=-1)),
    ],
)
def test_quotas_cannot_be_negative(db, field, value):
    ns = Namespace.objects.create(name="team-q")
    assert refuses(lambda: Quota.objects.create(namespace=ns, **{field: value}))


def test_namespace_names_must_be_dns1123_labels(db):
    assert refuses(lambda: Namespace.objects.create(name="Team_A"))


def test_a_domain_cannot_ask_for_a_negative_number_of_nodes(ns_a):
    # 0 is allowed: the domain follows its workload (NVIDIA's default).
    assert refuses(lambda: make_domain(ns_a, num_nodes=-1))
