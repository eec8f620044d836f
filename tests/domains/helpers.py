"""A scripted agent for service tests: reports what a real agent would, step by step."""

from __future__ import annotations

from domains.agents.report import AgentReport, Step
from domains.agents.services import agent_member_report
from domains.computedomains.models import ComputeDomain
from domains.inventory.models import Node


def report(node: Node, domain: ComputeDomain | None, step: str, **kw: object) -> None:
    """One agent report for `node` about `domain` at the domain's current generation."""
    if domain is not None:
        domain.refresh_from_db()
    agent_member_report(
        node_id=node.pk,
        report=AgentReport(
            domain_uid=str(domain.uid) if domain is not None else None,
            generation_applied=kw.pop("generation", domain.generation if domain else 0),
            step=step,
            **kw,  # type: ignore[arg-type]
        ),
    )


def all_ready(domain: ComputeDomain) -> None:
    for member in domain.members.select_related("node"):
        report(member.node, domain, Step.READY, daemon_state="READY", domain_state="UP")


def all_clean(domain: ComputeDomain) -> None:
    for member in domain.members.select_related("node").filter(active=True):
        report(member.node, None, Step.IDLE, clean=True)
