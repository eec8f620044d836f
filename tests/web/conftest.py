"""Fixtures for the page tests: domains driven through the real services (no ORM writes)."""

from __future__ import annotations

import pytest

from domains.agents.report import AgentReport, PeerStatus, Step
from domains.agents.services import agent_member_report
from domains.audit.events import Actor
from domains.computedomains import services
from domains.computedomains.models import ComputeDomain
from domains.computedomains.placing import domain_place
from domains.computedomains.specs import DomainSpec


def request_domain(user, namespace, name: str, nodes: int = 2, **spec) -> ComputeDomain:
    return services.domain_request(
        actor=Actor.for_user(user),
        namespace=namespace,
        spec=DomainSpec(name=name, num_nodes=nodes, **spec),
    )


def form_domain(domain: ComputeDomain) -> ComputeDomain:
    """Place the domain and report every member ready, as agents would."""
    placed = domain_place(domain_id=domain.pk)
    assert placed is not None
    members = list(placed.members.select_related("node").order_by("index"))
    for m in members:
        peers = [PeerStatus(p.index, p.ip_address, "CONNECTED") for p in members]
        agent_member_report(
            node_id=m.node_id,
            report=AgentReport(
                domain_uid=str(placed.uid),
                generation_applied=placed.generation,
                step=Step.READY,
                daemon_state="READY",
                domain_state="UP",
                peers=peers,
                message="IMEX daemon READY",
            ),
        )
    placed.refresh_from_db()
    return placed


@pytest.fixture
def ready_domain(topology, tenant_a, ns_a) -> ComputeDomain:
    return form_domain(request_domain(tenant_a, ns_a, "train", 2))
