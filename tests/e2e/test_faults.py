"""NVIDIA's failover set, for real: agents, daemons and trays going away mid-flight."""

from __future__ import annotations

import signal

import pytest
from django.utils import timezone

from agentwire.messages import Step
from domains.audit.models import Event
from domains.computedomains.models import DomainMember, Phase
from domains.inventory.models import Node
from nodeagent.config import Paths
from nodeagent.imex.supervisor import STARTING
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from tests.e2e.conftest import IP_PREFIX, phase_of, release_domain, request_domain, verbs

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def trays(transactional_db) -> list[Node]:
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    return list(Node.objects.filter(rack=rack).order_by("slot"))


def hostnames(nodes: list[Node]) -> list[str]:
    return [n.hostname for n in nodes]


def ready(domain) -> bool:
    return phase_of(domain) == Phase.READY


def test_an_agent_killed_mid_formation_comes_back_and_the_domain_still_forms(
    portal, tenant_api, trays
):
    victim, others = trays[0], trays[1:]
    # a slow peer keeps the domain Forming long enough to kill an agent in the middle
    slow = {others[0].hostname: {"start_delay_s": 1.5}}
    with (
        AgentFleet(portal, others, faults=slow, name="agents-rest") as rest,
        AgentFleet(portal, [victim], name="agents-victim") as lone,
    ):
        rest.wait_joined()
        lone.wait_joined()
        domain = request_domain(tenant_api, "survivor", 4)
        pid = wait_for(lambda: lone.daemon_pid(victim.hostname), 20, "victim's daemon")
        assert phase_of(domain) == Phase.FORMING
        lone.kill_agents()  # kill -9; its IMEX daemon runs on in its own session
        lone.start()
        wait_for(lambda: ready(domain), 30, "domain Ready after the agent came back")
        # the new agent re-adopted the daemon instead of restarting it
        assert lone.daemon_pid(victim.hostname) == pid
        assert "re-adopted running nvidia-imex" in lone.log()


def test_a_daemon_whose_agent_died_before_writing_its_pidfile_is_adopted_not_doubled(
    portal, tenant_api, trays
):
    """bench/soak.py's clock fault killed the agent process (kill -9) just after it started a
    tray's nvidia-imex, before it wrote the pidfile. The next agent found no pidfile and
    started a second daemon, which refused to run (NV_ERR_IN_USE) and was started again and
    again: the member never Ready, its domain stuck in Forming until the formation deadline,
    and the first daemon left running after the release, stopped by nobody. Here the agent
    is killed and the tray left as that agent left it: daemon running, its pid never written
    (the pidfile still says what the agent wrote before starting it)."""
    with AgentFleet(portal, trays) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "orphan", 4)
        wait_for(lambda: ready(domain), 30, "domain Ready")
        victim = DomainMember.objects.get(domain=domain, index=1).node.hostname
        paths = Paths(fleet.tray_root(victim))
        pid = fleet.daemon_pid(victim)
        fleet.kill_agents()
        paths.pidfile.write_text(f"{STARTING}\n")
        restarted = timezone.now().isoformat()
        fleet.start()

        def victim_ready_again() -> bool:
            said = Node.objects.get(hostname=victim).agent_report or {}
            return (
                said.get("received_at", "") > restarted
                and said.get("step") == Step.READY
                and not said.get("error")
            )

        wait_for(victim_ready_again, 60, f"{victim}'s new agent reporting ready")
        assert fleet.daemon_pid(victim) == pid  # adopted, no second one tried
        assert "NV_ERR_IN_USE" not in paths.daemon_log.read_text(errors="replace")
        assert paths.pidfile.read_text().split() == [str(pid)]
        wait_for(lambda: ready(domain), 30, "domain Ready")

        release_domain(tenant_api, "orphan")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "Released")
        assert fleet.daemon_pid(victim) is None  # stopped by the release, not left behind


def test_a_killed_daemon_degrades_the_domain_naming_the_tray_then_it_recovers(
    portal, tenant_api, trays
):
    with AgentFleet(portal, trays) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "wounded", 4)
        wait_for(lambda: ready(domain), 30, "domain Ready")
        victim = DomainMember.objects.get(domain=domain, index=2).node.hostname
        old = fleet.kill_daemon(victim, signal.SIGKILL)

        degraded = wait_for(
            lambda: Event.objects.filter(domain=domain, verb="domain.degraded").first(),
            20,
            "domain.degraded",
        )

        # Reports are folded per burst, so the first may be a peer's that lost the victim
        # (its daemon no longer sees the domain UP); the victim's own report, naming the
        # signal, is folded next. Until recovery the domain's status names the victim.
        def names_victim() -> bool:
            domain.refresh_from_db()
            seen = f"{degraded.details['nodes']} {degraded.message} {domain.message}"
            return victim in seen and "SIGKILL" in seen

        wait_for(names_victim, 20, f"the degraded domain naming {victim} and SIGKILL")
        wait_for(lambda: ready(domain), 30, "domain Ready again")
        assert fleet.daemon_pid(victim) not in (None, old)
        assert "domain.recovered" in verbs(domain)


def test_all_daemons_killed_at_once_and_the_domain_recovers(portal, tenant_api, trays):
    with AgentFleet(portal, trays) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "blackout", 4)
        wait_for(lambda: ready(domain), 30, "domain Ready")
        before = {h: fleet.daemon_pid(h) for h in hostnames(trays)}
        for host in hostnames(trays):
            fleet.kill_daemon(host, signal.SIGKILL)
        wait_for(lambda: "domain.degraded" in verbs(domain), 20, "domain.degraded")
        wait_for(lambda: ready(domain), 30, "domain Ready again")
        after = {h: fleet.daemon_pid(h) for h in hostnames(trays)}
        assert all(after[h] and after[h] != before[h] for h in before)


def test_a_gracefully_removed_tray_degrades_the_domain_and_rejoins(portal, tenant_api, trays):
    victim, others = trays[3], trays[:3]
    with (
        AgentFleet(portal, others, name="agents-rest") as rest,
        AgentFleet(portal, [victim], name="agents-victim") as lone,
    ):
        rest.wait_joined()
        lone.wait_joined()
        domain = request_domain(tenant_api, "maintenance", 4)
        wait_for(lambda: ready(domain), 30, "domain Ready")
        lone.stop()  # SIGTERM: the agent stops its daemon gracefully and exits
        assert lone.daemon_pid(victim.hostname) is None
        wait_for(lambda: phase_of(domain) == Phase.DEGRADED, 20, "domain Degraded")
        domain.refresh_from_db()
        assert victim.management_ip in domain.message  # peers name whom they lost
        lone.start()  # the tray is back: same node token, same desired state
        wait_for(lambda: ready(domain), 30, "domain Ready again")
        release_domain(tenant_api, "maintenance")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "domain Released")
        assert lone.leftovers(victim.hostname) == []


@pytest.mark.parametrize(
    ("knob", "word"),
    [
        ({"version": "570.86.10"}, "version mismatch"),
        ({"stale_node_map": "127.12.99.99"}, "node map mismatch"),
    ],
)
def test_a_mismatched_peer_is_reported_as_such_not_as_a_timeout(
    portal, tenant_api, trays, knob, word
):
    odd = trays[1].hostname
    with AgentFleet(portal, trays, faults={odd: knob}) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "mismatch", 4)

        def reported() -> bool:
            messages = DomainMember.objects.filter(domain=domain).values_list("message", flat=True)
            return any(word in m for m in messages)

        wait_for(reported, 20, f"a member reporting a {word}")
        odd_ip = Node.objects.get(hostname=odd).management_ip
        peer = DomainMember.objects.filter(domain=domain, message__contains=word).first()
        assert odd_ip in peer.message or peer.node.hostname == odd
        assert phase_of(domain) == Phase.FORMING
        domain.refresh_from_db()
        assert domain.reason != "FormationTimeout"
        release_domain(tenant_api, "mismatch")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "domain Released")
        assert fleet.leftovers(odd) == []
