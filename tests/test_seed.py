"""The seed builds the fabric operators expect."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import Client

from domains.computedomains.models import ComputeDomain
from domains.inventory.models import Clique, Gpu, Node, Rack
from domains.inventory.seed import RackLayout
from domains.tenancy.models import Membership, Quota

pytestmark = pytest.mark.django_db


def test_the_default_seed_is_two_nvl72_racks_with_rack_two_split_in_halves():
    call_command("seed_demo", "--no-users")
    assert Rack.objects.count() == 2
    assert Node.objects.count() == 36 and Gpu.objects.count() == 144
    r1, r2 = Rack.objects.order_by("position")
    assert [c.nodes.count() for c in Clique.objects.filter(rack=r1)] == [18]
    assert [c.nodes.count() for c in Clique.objects.filter(rack=r2)] == [9, 9]
    assert r1.switch_slots == 9
    ips = list(Node.objects.values_list("management_ip", flat=True))
    assert len(set(ips)) == 36 and all(ip.startswith("127.") for ip in ips)


def test_seeding_twice_changes_nothing():
    call_command("seed_demo", "--no-users")
    call_command("seed_demo", "--no-users")
    assert Node.objects.count() == 36


def test_it_builds_a_hundred_racks_with_custom_layouts():
    call_command("seed_demo", "--no-users", "--racks", "100", "--layout", "6,6,6")
    assert Rack.objects.count() == 100
    assert Node.objects.count() == 1800
    assert Clique.objects.count() == 300


def test_a_layout_larger_than_a_rack_is_refused():
    with pytest.raises(ValueError, match="at most 18"):
        RackLayout.parse("10,10")


def test_demo_users_get_namespaces_and_quotas():
    call_command("seed_demo", "--no-domains")
    assert Membership.objects.filter(user__username="alice", namespace__name="team-a").exists()
    assert Membership.objects.filter(user__username="bob", namespace__name="team-b").exists()
    assert Quota.objects.get(namespace__name="team-a").max_gpus == 72


def test_demo_logins_are_refused_when_debug_is_off(settings):
    settings.DEBUG = False
    call_command("seed_demo", "--no-domains")
    assert not Client().login(username="alice", password="demo")


def test_demo_logins_work_in_debug(settings):
    settings.DEBUG = True
    call_command("seed_demo", "--no-domains")
    assert Client().login(username="alice", password="demo")


def test_the_demo_opens_on_domains_in_several_phases():
    call_command("seed_demo")
    phases = dict(ComputeDomain.objects.values_list("name", "phase"))
    assert phases["llm-pretrain"] in ("Admitted", "Forming", "Ready")
    assert phases["moe-large"] == "Pending"
    assert phases["smoke-test"] == "Released"
    assert phases["nccl-allreduce"] in ("Admitted", "Forming", "Ready")
    assert ComputeDomain.objects.get(name="nccl-allreduce").span_racks == 2
    assert Node.objects.filter(state="cordoned").count() == 1
    call_command("seed_demo")  # again: nothing asked twice
    assert ComputeDomain.objects.count() == 4


@pytest.mark.parametrize("username", ["alice", "bob"])
def test_every_demo_tenant_can_request_a_four_tray_domain_in_the_seeded_demo(username):
    from django.contrib.auth.models import User

    from domains.audit.events import Actor
    from domains.computedomains.services import domain_request
    from domains.computedomains.specs import DomainSpec

    call_command("seed_demo")
    user = User.objects.get(username=username)
    namespace = Membership.objects.get(user=user).namespace
    domain = domain_request(
        actor=Actor.for_user(user), namespace=namespace, spec=DomainSpec(name="four", num_nodes=4)
    )
    assert domain.phase == "Admitted"


def test_a_second_demo_on_the_host_seeds_its_trays_on_its_own_loopback_range(monkeypatch):
    monkeypatch.setenv("PORTAL_DEMO_IP_PREFIX", "127.7")
    call_command("seed_demo", "--no-users")
    ips = list(Node.objects.values_list("management_ip", flat=True))
    assert len(ips) == 36 and all(ip.startswith("127.7.") for ip in ips)


def test_an_address_base_that_is_not_two_numbers_is_refused_by_name(monkeypatch):
    from django.core.management import CommandError

    monkeypatch.setenv("PORTAL_DEMO_IP_PREFIX", "127.300")
    with pytest.raises(CommandError, match="PORTAL_DEMO_IP_PREFIX must be two numbers"):
        call_command("seed_demo", "--no-users")
    assert not Node.objects.exists()


def test_the_seed_says_a_tray_it_cordoned_is_a_tray_not_a_domain():
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    lines = [line.split() for line in out.getvalue().splitlines() if "cordoned" in line]
    assert lines and lines[0][:2] == ["tray", "gb-r01-t18:"], out.getvalue()
    domains = [line.split()[1] for line in out.getvalue().splitlines() if "  domain " in line]
    assert domains and all("/" in name for name in domains)  # namespace/name, never a tray
