"""A placed domain larger than a clique, for real: one IMEX ensemble per NVLink clique, each
tray's nodes file on its own disk listing only its own clique's trays; a daemon failure in
one clique degrades the domain naming that clique (the other clique's daemons untouched);
release tears down every ensemble and gives every clique's channel back."""

from __future__ import annotations

import signal

import pytest

from domains.audit.models import Event
from domains.computedomains.models import ChannelAllocation, DomainMember, MemberState, Phase
from domains.inventory.models import Node
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from tests.e2e.conftest import phase_of, release_domain, request_domain, verbs

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(44)  # this module's loopback range


def by_clique(domain) -> dict[str, list[DomainMember]]:
    """The domain's active members per clique name, in index order."""
    found: dict[str, list[DomainMember]] = {}
    for m in (
        DomainMember.objects.filter(domain=domain, active=True)
        .select_related("node", "clique__rack")
        .order_by("clique__name", "index")
    ):
        found.setdefault(m.clique.name, []).append(m)
    return found


def test_27_trays_over_two_cliques_form_two_ensembles_and_release_tears_both_down(
    portal, tenant_api
):
    racks = factories.make_racks("18", "18", ip_prefix=IP_PREFIX)
    trays = Node.objects.filter(rack__in=racks)
    with AgentFleet(portal, trays) as fleet:
        fleet.wait_joined(120)
        domain = request_domain(tenant_api, "two-racks", 27)
        wait_for(lambda: phase_of(domain) == Phase.READY, 180, "domain Ready")

        ensembles = by_clique(domain)
        assert sorted(len(members) for members in ensembles.values()) == [9, 18]
        channels = dict(
            ChannelAllocation.objects.filter(domain=domain).values_list("clique__name", "channel")
        )
        assert sorted(channels) == sorted(ensembles)  # one channel from each clique's ledger
        for name, members in ensembles.items():
            assert [m.index for m in members] == list(range(len(members)))
            expected = "".join(f"{m.ip_address}\n" for m in members)
            for m in members:
                host = m.node.hostname
                assert m.state == MemberState.READY
                # The nodes file on the tray's disk: its own clique's trays, none of the other.
                assert fleet.nodes_file(host) == expected, f"{host} ({name})"
                assert fleet.channel_devices(host).keys() == {f"channel{channels[name]}"}
        domain.refresh_from_db()
        assert domain.message == "all 27 members ready, in 2 cliques"

        release_domain(tenant_api, "two-racks")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 120, "domain Released")
        for members in ensembles.values():
            for m in members:
                assert fleet.leftovers(m.node.hostname) == [], m.node.hostname
        assert not ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True)
        assert ChannelAllocation.objects.filter(domain=domain).count() == 2
        assert verbs(domain)[-1] == "domain.released"


def test_a_daemon_failure_in_one_clique_degrades_the_domain_naming_that_clique(portal, tenant_api):
    racks = factories.make_racks("4", "4", ip_prefix=IP_PREFIX)
    with AgentFleet(portal, Node.objects.filter(rack__in=racks)) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "split", 6)  # more than a clique holds
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        ensembles = by_clique(domain)
        assert len(ensembles) == 2
        hurt, whole = sorted(ensembles, key=lambda name: len(ensembles[name]))
        victim = ensembles[hurt][1]
        others = {m.node.hostname: fleet.daemon_pid(m.node.hostname) for m in ensembles[whole]}

        fleet.kill_daemon(victim.node.hostname, signal.SIGKILL)

        named = f"clique {hurt} (rack {victim.clique.rack.name})"
        degraded = wait_for(
            lambda: Event.objects.filter(domain=domain, verb="domain.degraded").first(),
            30,
            "domain.degraded",
        )
        assert degraded.message.startswith(named), degraded.message
        assert degraded.message.endswith("the other clique is up"), degraded.message
        assert whole not in degraded.message
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready again")
        # The other clique's ensemble went on as it was: same daemons, never restarted.
        assert {host: fleet.daemon_pid(host) for host in others} == others
        release_domain(tenant_api, "split")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
