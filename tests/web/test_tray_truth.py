"""A tray tells one truth on every page and in the API: an agent killed under a running
domain shows on the tray's page, on the rack drawing and in the API as a silent agent (not a
dead daemon), and its tenant reads what that means; an operator picks a replacement for a
domain that opted out of automatic ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from agentwire.messages import status_report
from domains.audit.events import SYSTEM, Actor
from domains.computedomains.members import domain_member_report
from domains.computedomains.models import DomainMember, ReplacePolicy
from domains.computedomains.reconcile import reap_stale_heartbeats
from domains.computedomains.trays import tray_act
from domains.inventory.models import Node
from domains.tenancy.tokens import token_create
from testbed import factories
from tests.support.lifecycle import form, ready_report, request_domain

pytestmark = pytest.mark.django_db


@pytest.fixture
def killed(topology, ns_a, tenant_a):
    """team-a/train Ready on two trays; the agent of its first tray was killed 75 s ago
    (its IMEX daemon, last READY, runs on)."""
    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    tray = domain.members.order_by("index").first().node
    Node.objects.filter(pk=tray.pk).update(daemon_state="READY")
    factories.stale_heartbeat(tray, timedelta(seconds=75))
    reap_stale_heartbeats()
    tray.refresh_from_db()
    return domain, tray


def test_the_tray_page_says_its_agent_is_silent_and_what_its_daemon_last_said(
    client, operator, killed
):
    _, tray = killed
    client.force_login(operator)
    page = client.get(reverse("operator:node", args=[tray.hostname])).content.decode()
    status = page.split('id="node-status"', 1)[1].split("</dd>", 1)[0]
    assert 'data-status="stale"' in status and "agent silent" in status
    assert "a domain still holds it" in status
    agent = page.split('id="node-agent"', 1)[1].split("</dd>", 1)[0]
    assert "not reporting since" in agent and "(IMEX daemon last READY)" in agent
    daemon = page.split('id="node-daemon"', 1)[1].split("</dd>", 1)[0]
    assert "READY" in daemon and "not known to hold now" in daemon


def test_the_rack_drawing_shows_the_silent_agent_as_its_own_state(client, operator, killed):
    _, tray = killed
    client.force_login(operator)
    svg = client.get(reverse("operator:rack", args=[tray.rack.name])).content.decode()
    drawn = svg.split(f'data-hostname="{tray.hostname}"', 1)[1].split("</g>", 1)[0]
    assert 'data-status="stale"' in drawn
    assert "agent silent · team-a…" in drawn  # both, cut short to fit
    assert "agent silent, in use" in svg  # its hover card
    assert 'fill="url(#el-silent)"' in drawn


def test_its_tenant_reads_what_a_silent_agent_means(client, tenant_a, killed):
    domain, tray = killed
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", domain.uid])).content.decode()
    card = page.split('id="domain-silent"', 1)[1].split("</section>", 1)[0]
    assert f"The agent of tray {tray.hostname} is not reporting" in card
    assert "the tray's agent is not reporting; its IMEX daemon was last READY" in card
    assert "your job may be unaffected" in card and "The operators are told" in card
    row = page.split('data-member="0" data-state="', 1)[1].split('"', 1)[0]
    assert row == "silent"  # not "failed"
    assert ">Agent silent<" in page and ">Failed<" not in page


def test_the_api_gives_each_tray_one_status_and_says_whether_its_agent_reports(killed, operator):
    _, tray = killed
    _, raw = token_create(actor=SYSTEM, user=operator, name="t")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    one = api.get(f"/api/v1/nodes/{tray.hostname}/").json()
    assert (one["status"], one["agent"], one["inUse"]) == ("stale", "silent", True)
    listed = {n["hostname"]: n for n in api.get("/api/v1/nodes/?page_size=50").json()["results"]}
    assert listed[tray.hostname]["status"] == "stale"
    assert {n["status"] for h, n in listed.items() if h != tray.hostname} <= {"free", "in_use"}


def test_tenants_read_one_readable_sentence_and_never_the_daemons_log(topology, ns_a, tenant_a):
    """An agent's error carries the daemon's last log lines (thread ids, start-up lines, a
    previous domain's): the tray's page shows them to operators; a domain's status, its
    formation row and its events say only the first line."""
    domain = form(request_domain(ns_a, tenant_a, "logs", num_nodes=2))
    tray = domain.members.order_by("index").first().node
    error = (
        "nvidia-imex exited (exit code 1); restarted it\nIts log ends:\n"
        "[Nov 28 2026 16:50:01] [INFO] [tid 4411] IMEX version 580.82.07 is running\n"
        "[Nov 28 2026 16:50:02] [ERROR] [tid 4412] node map of domain team-b/old differs"
    )
    domain_member_report(
        node_id=tray.pk,
        report=status_report(
            domain_uid=str(domain.uid),
            generation_applied=domain.generation,
            step="starting_daemon",
            daemon_state="INITIALIZING",
            error=error,
        ),
    )
    domain.refresh_from_db()
    member = DomainMember.objects.get(domain=domain, node=tray, active=True)
    assert member.message == "nvidia-imex exited (exit code 1); restarted it"
    assert "tid" not in domain.message and "team-b/old" not in domain.message
    assert not domain.events.filter(message__contains="tid 44").exists()


def test_an_operator_picks_the_tray_that_replaces_a_lost_one(
    client, operator, topology, ns_a, tenant_a
):
    domain = form(
        request_domain(ns_a, tenant_a, "manual", num_nodes=2, replace_policy=ReplacePolicy.MANUAL)
    )
    lost = domain.members.order_by("index").first().node
    actor = Actor.for_user(operator)
    tray_act(actor=actor, node=lost, action="drain")
    tray_act(actor=actor, node=lost, action="mark_down", reason="XID 79")
    client.force_login(operator)
    url = reverse("tenant:domain", args=["team-a", domain.uid])
    page = client.get(url).content.decode()
    picker = page.split('id="domain-replace-form"', 1)[1].split("</form>", 1)[0]
    assert f"<option>{lost.hostname}</option>" in picker
    spare = picker.split('id="replace-with">', 1)[1].split("<option>", 2)[1].split("<", 1)[0]
    done = client.post(
        reverse("operator:domain_replace", args=[domain.uid]),
        {"tray": lost.hostname, "replacement": spare},
        follow=True,
    ).content.decode()
    assert f"{lost.hostname} replaced by {spare}" in done
    assert domain.members.get(active=True, index=0).node.hostname == spare
    # A tenant may not.
    client.force_login(tenant_a)
    refused = client.post(
        reverse("operator:domain_replace", args=[domain.uid]),
        {"tray": spare, "replacement": lost.hostname},
    )
    assert refused.status_code in (302, 403) and refused.status_code != 200
    assert domain.members.get(active=True, index=0).node.hostname == spare
    domain_member_report(node_id=lost.pk, report=ready_report(domain))  # changes nothing
    assert not DomainMember.objects.filter(node=lost, active=True).exists()


def test_a_tenant_whose_down_tray_was_replaced_still_reads_the_operators_notes(
    client, operator, topology, ns_a, tenant_a
):
    from domains.computedomains.failover import domains_replace_lost
    from domains.computedomains.incidents import incident_note
    from domains.computedomains.models import Incident

    domain = form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    dead = domain.members.order_by("index").last().node
    actor = Actor.for_user(operator)
    tray_act(actor=actor, node=dead, action="drain")
    tray_act(actor=actor, node=dead, action="mark_down", reason="PSU fault")
    assert domains_replace_lost() == 1
    new = domain.members.get(active=True, index=1).node
    incident_note(actor=actor, incident=Incident.objects.get(), note="PSU swap by 14:00 UTC.")
    client.force_login(tenant_a)
    page = client.get(reverse("tenant:domain", args=["team-a", domain.uid])).content.decode()
    card = page.split('id="domain-replaced"', 1)[1].split("</section>", 1)[0]
    assert f"Tray {dead.hostname} is down; {new.hostname} took its place" in card
    assert '("PSU fault")' in card and "PSU swap by 14:00 UTC." in card
    assert 'id="domain-incident"' not in page  # the tray is no longer the domain's
