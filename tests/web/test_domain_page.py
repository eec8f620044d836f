"""A domain that follows its workload (`numNodes: 0`) on its page: waiting for workload
before any tray joined, then every join and leave."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import reverse

from agentwire.messages import ClaimRef
from domains.computedomains.claims import claim_admit, claim_release
from domains.inventory.models import Node
from tests.support.lifecycle import request_domain

pytestmark = pytest.mark.django_db


def test_a_domain_that_follows_its_workload_shows_it_waiting_then_joins_and_leaves(
    client, topology, tenant_a, ns_a
):
    domain = request_domain(ns_a, tenant_a, "elastic", num_nodes=0)
    client.force_login(tenant_a)
    url = reverse("tenant:domain", args=["team-a", domain.uid])
    page = client.get(url).content.decode()
    assert "follows the workload: no trays now" in page and "waiting for workload" in page
    assert 'id="waiting-for-workload"' in page
    assert "waiting for placement" not in page

    tray = Node.objects.order_by("slot").first()
    claim = ClaimRef(uid=str(uuid.uuid4()), namespace="team-a", name="worker-0-channel")
    claim_admit(node=tray, claim=claim, domain_uid=str(domain.uid))
    page = client.get(url).content.decode()
    assert 'id="joins"' in page and "still in" in page
    assert "waiting for workload" not in page

    claim_release(node=tray, claim_uid=claim["uid"])
    page = client.get(url).content.decode()
    assert "still in" not in page.split('id="joins"', 1)[1]


def test_the_tray_page_shows_the_daemons_last_log_lines_when_it_exited(client, operator, topology):
    from agentwire.messages import Step, status_report
    from domains.agents.heartbeats import agent_report

    node = topology.nodes.get(slot=1)
    error = (
        "nvidia-imex exited (exit code 1); starting it again in 2 s\nIts log ends:\n"
        "nvidia-imex: bind 127.0.1.1:50000: [Errno 98] Address already in use"
    )
    agent_report(
        node=node,
        report=status_report(domain_uid=None, generation_applied=0, step=Step.IDLE, error=error),
    )
    client.force_login(operator)
    page = client.get(reverse("operator:node", args=[node.hostname])).content.decode()
    step = page.split('id="node-agent-step">', 1)[1].split("</dd>", 1)[0]
    assert "nvidia-imex exited (exit code 1); starting it again in 2 s</span>" in step
    # The log lines are shown once, in the agent's box above (the health banner), linked.
    assert 'href="#agent-trouble-log"' in step and "Address already in use" not in step
    banner = client.get(f"/fabric/health/?tray={node.hostname}").content.decode()
    assert "nvidia-imex: bind 127.0.1.1:50000: [Errno 98] Address already in use" in banner


def test_a_tenant_is_told_that_a_tray_of_her_domain_is_cordoned_or_draining(
    client, operator, tenant_a, ns_a, topology
):
    from domains.audit.events import Actor
    from domains.inventory.services import node_cordon, node_drain
    from tests.support.lifecycle import form

    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    first, second = [m.node for m in domain.members.order_by("index")]
    node_cordon(actor=Actor.for_user(operator), node=first, reason="fan")
    node_drain(actor=Actor.for_user(operator), node=second, reason="PSU")
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", domain.uid])).content.decode()
    rows = page.split('id="timeline"', 1)[1].split("</table>", 1)[0]
    assert "tray cordoned by an operator" in rows.split(first.hostname, 1)[1].split("</tr>")[0]
    draining = rows.split(second.hostname, 1)[1].split("</tr>")[0]
    assert "tray draining: goes for service once released" in draining


def test_the_mark_down_form_says_tenants_read_its_reason(client, operator, topology):
    node = topology.nodes.get(slot=1)
    client.force_login(operator)
    url = reverse("operator:node_action", args=[node.hostname, "mark_down"])
    page = client.get(url).content.decode()
    assert "Tenants whose domain uses this tray read this reason" in page
    cordon = reverse("operator:node_action", args=[node.hostname, "cordon"])
    assert "read this reason" in client.get(cordon).content.decode()  # tenants are told too
    node.state = "cordoned"
    node.save(update_fields=["state"])
    uncordon = reverse("operator:node_action", args=[node.hostname, "uncordon"])
    assert "read this reason" not in client.get(uncordon).content.decode()


def test_a_domain_that_follows_its_workload_says_it_waits_once_and_shows_no_eta(
    client, tenant_a, ns_a, topology
):
    domain = request_domain(ns_a, tenant_a, "wl", num_nodes=0)
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", domain.uid])).content.decode()
    status = page.split('id="status-h"', 1)[1].split("</section>", 1)[0]
    assert status.lower().count("waiting for workload") == 1
    assert "Estimated placement" not in status
    assert "starts when its first trays are Ready" in status
    assert "No tray has joined yet" in page


def test_the_domain_page_names_its_channel_numbers_as_numbers(client, tenant_a, ready_domain):
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", ready_domain.uid])).content
    held = page.decode().split('id="domain-channels">', 1)[1].split("</dd>", 1)[0]
    assert "<dt>IMEX channels held</dt>" in page.decode()
    assert held.startswith("channel ") and held.removeprefix("channel ").isdigit()


def test_a_tray_forming_again_after_a_recovery_shows_its_steps_in_order(
    client, tenant_a, ready_domain
):
    from agentwire.messages import Step
    from tests.support.lifecycle import report

    member = ready_domain.members.select_related("node").order_by("index").first()
    report(member.node, ready_domain, Step.CONFIGURING)  # its daemon restarts, say
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", ready_domain.uid])).content
    row = page.decode().split(f'<tr data-member="{member.index}"', 1)[1].split("</tr>", 1)[0]
    steps = [(d, w.strip()) for d, w in re.findall(r'<span class="step( done)?">([A-Za-z ]+)', row)]
    assert steps == [
        (" done", "Assigned"),
        (" done", "Configuring"),
        ("", "Waiting for peers"),
        ("", "Ready"),
    ]
