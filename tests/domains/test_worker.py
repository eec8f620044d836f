"""The controller on a real Celery worker and the real Redis, with scripted agents.

The agents here are a level-triggered script in the test process (fetch what the tray
should run, report it done through the agent service, which also records the heartbeat),
so the test is about the controller: placement happens only on the worker, and a worker
killed mid-way plus a lost message still end in Released.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentwire.messages import Step, status_report
from domains.agents.heartbeats import agent_report
from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain, Phase
from domains.computedomains.selectors import desired_member, member_should_run
from domains.computedomains.services import domain_release, domain_request
from domains.computedomains.specs import DomainSpec
from domains.inventory.models import Node
from portal.celery import app
from testbed import factories
from testbed.processes import SESSION_QUEUE, running, start_beat, start_worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def session_queue() -> Iterator[str]:
    """Tasks this test process enqueues go to the queue the test's workers consume."""
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = SESSION_QUEUE
    yield SESSION_QUEUE
    app.conf.task_default_queue = previous


class ScriptedAgents:
    """One reconcile cycle per tray: do what the desired state says, report it."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    def cycle(self) -> None:
        for node in self.nodes:
            member = desired_member(node)
            if member is None:
                report = status_report(domain_uid=None, generation_applied=0, step=Step.IDLE)
            elif member_should_run(member):
                report = status_report(
                    domain_uid=str(member.domain.uid),
                    generation_applied=member.domain.generation,
                    step=Step.READY,
                    daemon_state="READY",
                    domain_state="UP",
                    channels_present=[1],
                )
            else:
                report = status_report(
                    domain_uid=None,
                    generation_applied=member.domain.generation,
                    step=Step.IDLE,
                    clean=True,
                )
            agent_report(node=node, report=report)  # heartbeat, then domain_member_report

    def until(self, domain: ComputeDomain, phase: str, timeout: float = 20) -> None:
        def reached() -> bool:
            self.cycle()
            domain.refresh_from_db()
            return domain.phase == phase

        wait_until(reached, timeout=timeout, interval=0.2, what=f"{domain.name} {phase}")


def test_a_domain_goes_from_request_to_released_across_a_killed_worker(session_queue):
    (rack,) = factories.make_racks("4", ip_prefix="127.11")
    ns = factories.make_namespace("worker-test")
    actor = Actor.for_user(factories.make_user("worker-tenant"))
    agents = ScriptedAgents(list(Node.objects.filter(rack=rack)))

    first_worker = start_worker("worker-a", concurrency=2)
    with running(first_worker):
        a = domain_request(actor=actor, namespace=ns, spec=DomainSpec(name="a", num_nodes=4))
        agents.until(a, Phase.READY)  # placed by the worker, formed by the agents
        first_worker.kill()  # SIGKILL, mid-way through the story

        domain_release(actor=actor, domain=a)
        agents.until(a, Phase.RELEASED)
        b = domain_request(actor=actor, namespace=ns, spec=DomainSpec(name="b", num_nodes=4))
        with app.connection_for_write() as conn:  # and the message placing "b" is lost too
            conn.default_channel.queue_purge(session_queue)
        b.refresh_from_db()
        assert b.phase == Phase.ADMITTED

    agents.cycle()  # the trays keep reporting while no worker runs
    second_worker = start_worker("worker-b", concurrency=2)
    beat = start_beat()  # reconcile every second (PORTAL_RECONCILE_SECONDS in process_env)
    with running(beat, second_worker):
        agents.until(b, Phase.READY, timeout=30)
        domain_release(actor=actor, domain=b)
        agents.until(b, Phase.RELEASED)
    assert "'placed': 1}" in second_worker.log()  # reconcile placed "b", not a message
    assert [m.index for m in b.members.order_by("index")] == [0, 1, 2, 3]
