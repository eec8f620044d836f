"""The network between the agents and the portal cut for 60 s (docs/reliability.md): the
trays keep their IMEX daemons and channel devices, the portal marks the silent members not
ready (the domain is Degraded, naming them), and when the link returns the agents report
again and the domain is Ready: never Failed, nothing torn down or started again.

The agents and their emulated daemons run in a network namespace (testbed.netcut); the
cut takes the link down, so packets are dropped and no connection is closed: the agents see
timeouts, not refusals, as when a switch port dies. Peer traffic between the trays stays up
(the tray addresses live on the namespace's loopback).
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain, Phase
from domains.inventory.models import Node
from domains.tenancy.tokens import token_create
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from testbed.netcut import NetnsLink
from testbed.processes import running, start_beat, start_server, start_worker
from tests.e2e.conftest import IP_PREFIX, verbs

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CUT_S = 60
STALE_S = 15  # PORTAL_HEARTBEAT_STALE_S: silence after which a member counts as not ready


def test_agents_cut_off_for_60_s_keep_daemons_and_channels_and_the_domain_recovers():
    why = NetnsLink.available()
    if why:
        pytest.skip(f"no network namespace here: {why}")
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    nodes = list(Node.objects.filter(rack=rack))
    ns = factories.make_namespace("cut", max_gpus=72, max_nodes=18, max_domains=4)
    user = factories.make_user("cut-tenant")
    factories.add_member(user, ns, "member")
    _, token = token_create(actor=Actor.for_user(user), user=user, name="cut")
    # A cut shorter than the failover grace (PORTAL_FAILOVER_GRACE_S) never costs the domain
    # its trays: here the grace is twice the cut (tests/e2e/test_failover.py is the other way).
    env = {"PORTAL_HEARTBEAT_STALE_S": str(STALE_S), "PORTAL_FAILOVER_GRACE_S": str(2 * CUT_S)}
    with NetnsLink() as link:
        server, url = start_server(host=link.host_ip, **env)
        worker = start_worker(**env)
        beat = start_beat(**env)
        fleet = AgentFleet(
            url, nodes, wrap=link.wrap, health_host=link.ns_ip, heartbeat_interval=2.0
        )
        with (
            running(beat, worker, server),
            fleet,
            httpx.Client(
                base_url=f"{url}/api/v1/namespaces/cut",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            ) as api,
        ):
            fleet.wait_joined()
            created = api.post(
                "/computedomains/", json={"metadata": {"name": "steady"}, "spec": {"numNodes": 2}}
            )
            assert created.status_code == 201, created.text
            domain = ComputeDomain.objects.get(name="steady")
            wait_for(lambda: _phase(domain) == Phase.READY, 60, "domain Ready")
            hosts = [n.hostname for n in nodes]
            pids = {h: fleet.daemon_pid(h) for h in hosts}
            channels = {h: fleet.channel_devices(h) for h in hosts}
            assert all(pids.values()) and all(channels.values())

            phases = PhaseWatch(domain)
            with phases:
                link.cut()
                cut_at = time.monotonic()
                while time.monotonic() - cut_at < CUT_S:
                    # nobody on the trays acts on the portal's silence
                    assert {h: fleet.daemon_pid(h) for h in hosts} == pids
                    assert {h: fleet.channel_devices(h) for h in hosts} == channels
                    time.sleep(2)
                assert _phase(domain) == Phase.DEGRADED  # the portal noticed the silence
                silent_since = {n.pk: _heartbeat(n) for n in nodes}
                link.heal()
                wait_for(lambda: _phase(domain) == Phase.READY, 60, "Ready after the link returned")
            wait_for(  # every tray reports again
                lambda: all(_heartbeat(n) > silent_since[n.pk] for n in nodes), 30, "heartbeats"
            )
            assert {h: fleet.daemon_pid(h) for h in hosts} == pids  # never restarted
            assert {h: fleet.channel_devices(h) for h in hosts} == channels
            assert phases.seen[0] == Phase.READY and phases.seen[-1] == Phase.READY
            assert Phase.DEGRADED in phases.seen and Phase.FAILED not in phases.seen
            story = verbs(domain)
            assert "member.silent" in story and "domain.failed" not in story
            assert fleet.proc is not None and fleet.proc.alive()  # the agents rode it out
    assert "Internal Server Error" not in server.log()


def _phase(domain: ComputeDomain) -> str:
    domain.refresh_from_db()
    return domain.phase


def _heartbeat(node: Node):
    node.refresh_from_db()
    return node.last_heartbeat


class PhaseWatch:
    """Every phase the domain passed through (polled twice a second, in order, no repeats)."""

    def __init__(self, domain: ComputeDomain) -> None:
        self.domain_id = domain.pk
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from django.db import connection

        try:
            while not self._stop.is_set():
                phase = ComputeDomain.objects.values_list("phase", flat=True).get(pk=self.domain_id)
                if not self.seen or self.seen[-1] != phase:
                    self.seen.append(phase)
                self._stop.wait(0.5)
        finally:
            connection.close()

    def __enter__(self) -> PhaseWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._run_once()

    def _run_once(self) -> None:
        phase = ComputeDomain.objects.values_list("phase", flat=True).get(pk=self.domain_id)
        if not self.seen or self.seen[-1] != phase:
            self.seen.append(phase)
