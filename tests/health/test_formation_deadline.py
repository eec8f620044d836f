"""A domain whose tray's agent cannot fetch its desired state fails at the formation
deadline saying what that agent says, not that it "may be down"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentwire.messages import Step, status_report
from domains.agents.heartbeats import agent_report
from domains.computedomains.models import Phase
from domains.computedomains.reconcile import reconcile
from domains.computedomains.selectors import domain_peers
from tests.support.lifecycle import report, request_and_place

pytestmark = pytest.mark.django_db


def test_the_deadline_names_the_tray_and_what_its_agent_says(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    first, second = domain_peers(domain)
    report(first.node, domain, Step.READY)
    link = "desired state: HTTP 500 Internal Server Error"
    # It reports (a heartbeat) but never learnt of the domain.
    agent_report(
        node=second.node,
        report=status_report(step=Step.IDLE, generation_applied=0, link_error=link),
    )
    reconcile(now=timezone.now() + timedelta(minutes=10))
    domain.refresh_from_db()
    assert (domain.phase, domain.reason) == (Phase.FAILED, "FormationTimeout")
    assert domain.message.startswith(f"formation deadline passed: {second.node.hostname} (#1)")
    assert domain.message.endswith(f"; its agent says: {link}")
    assert "may be down" not in domain.message


def test_a_silent_agent_is_still_said_to_be_maybe_down(topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=2)
    first, _ = domain_peers(domain)
    report(first.node, domain, Step.READY)
    reconcile(now=timezone.now() + timedelta(minutes=10))
    domain.refresh_from_db()
    assert domain.message.endswith("(#1) never reported; its agent may be down")
