"""The health banner is the operators': anonymous users are sent to sign in, tenants are
refused, and an operator reads what is wrong and which trays."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from agentwire.messages import status_report
from domains.agents.heartbeats import agent_report
from domains.health import calls, workers
from domains.inventory.models import Node
from testbed import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def failing_tray(db) -> Node:
    rack = factories.make_racks("2", ip_prefix=factories.tray_ip_prefix(13))[0]
    node = Node.objects.get(rack=rack, slot=2)
    cache.set(workers.KEY, {"name": "celery@w1", "at": time.time()}, 60)
    calls.agent_call_failed(node_id=node.pk, call="desired state", status=500, exc=KeyError(7))
    return node


def test_anonymous_users_are_sent_to_sign_in(client, failing_tray):
    answer = client.get("/fabric/health/")
    assert answer.status_code == 302 and "/login/" in answer["Location"]


def test_tenants_are_refused(client, tenant_a, failing_tray):
    client.force_login(tenant_a)
    assert client.get("/fabric/health/").status_code == 403
    assert client.get(f"/fabric/health/?tray={failing_tray.hostname}").status_code == 403


def test_an_operator_reads_what_is_wrong_and_what_the_trays_agent_says(
    client, operator, failing_tray
):
    client.force_login(operator)
    page = client.get(f"/fabric/health/?tray={failing_tray.hostname}").content.decode()
    assert 'id="health-banner" data-status="degraded"' in page
    assert f'data-hostname="{failing_tray.hostname}"' in page
    assert "desired state: HTTP 500 (KeyError: 7)" in page  # what its agent was answered
    fleet = client.get("/fabric/").content.decode()
    assert 'id="health-banner"' in fleet and 'id="agent-trouble"' not in fleet


def test_nothing_shows_while_all_is_well(client, operator, failing_tray):
    calls.forget_local()
    cache.delete(calls.INDEX_KEY)
    client.force_login(operator)
    assert client.get("/fabric/health/").content.decode().strip() == ""


def test_a_tray_page_shows_the_daemons_last_log_lines_its_agent_sent(
    client, operator, failing_tray
):
    error = "nvidia-imex exited (exit code 1); restarted it\nIts log ends:\nbind: Address in use"
    agent_report(
        node=failing_tray, report=status_report(step="failed", generation_applied=0, error=error)
    )
    client.force_login(operator)
    page = client.get(f"/fabric/nodes/{failing_tray.hostname}/").content.decode()
    assert 'id="agent-trouble"' in page
    assert 'id="agent-trouble-error">nvidia-imex exited (exit code 1); restarted it<' in page
    assert ">bind: Address in use</pre>" in page
