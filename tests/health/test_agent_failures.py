"""A server error answered to a tray's agent is recorded for the portal's health (which
call, why), and only for the tray whose token made the call. The failure is real: a column
the facts update reads is gone, as after a migration that did not run."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client

from agentwire.messages import status_report
from domains.agents.joining import agent_join
from domains.computedomains.models import DomainMember
from domains.health import calls
from domains.inventory.models import NodeCondition
from portal.api.agent import fastpath
from testbed import factories
from testbed.agents import ensure_join_token, node_facts

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def column_gone(model, name: str) -> Iterator[None]:
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{name}" TO "{name}_gone"')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{name}_gone" TO "{name}"')


@pytest.fixture
def joined():
    rack = factories.make_racks("2", ip_prefix=factories.tray_ip_prefix(13))[0]
    return [
        agent_join(join_token=ensure_join_token(), facts=node_facts(node))
        for node in rack.nodes.order_by("slot")
    ]


def put_facts(node, token: str):
    client = Client(raise_request_exception=False)
    return client.put(
        f"/api/v1/agent/nodes/{node.pk}/facts/",
        data=node_facts(node),
        content_type="application/json",
        headers={"authorization": f"Node {token}"},
    )


def test_a_failed_facts_update_is_recorded_for_the_tray_with_its_cause(joined):
    (node, token), _ = joined
    with column_gone(NodeCondition, "blocking"):
        answer = put_facts(node, token)
    assert answer.status_code == 500
    failure = calls.failure_of(node.pk)
    assert failure is not None
    assert (failure.call, failure.status) == ("facts", 500)
    assert failure.error.startswith("ProgrammingError: column")
    assert node.pk in calls.failures()


def test_another_trays_token_is_refused_and_puts_nothing_on_the_tray(joined):
    (node, _), (_, other_token) = joined
    with column_gone(NodeCondition, "blocking"):
        answer = put_facts(node, other_token)
    assert answer.status_code == 403
    assert calls.failure_of(node.pk) is None


def test_a_failed_report_on_the_agents_fast_path_is_recorded_as_the_status_report(joined):
    (node, token), _ = joined
    body = json.dumps(status_report(step="idle", generation_applied=0)).encode()
    with column_gone(DomainMember, "active"):  # the heartbeat's statement reads it
        status, _ = fastpath._serve("status", node.pk, token, body, "rid-health-0001")
    assert status == 500
    failure = calls.failure_of(node.pk)
    assert failure is not None and (failure.call, failure.status) == ("status report", 500)
    assert "active" in failure.error


def test_a_made_up_token_on_the_fast_path_puts_nothing_on_the_tray(joined):
    (node, _), _ = joined
    body = json.dumps(status_report(step="idle", generation_applied=0)).encode()
    with column_gone(DomainMember, "active"):
        status, _ = fastpath._serve("status", node.pk, "dpn_made-up", body, "rid-health-0002")
    assert status == 500  # the statement fails before the token is checked
    assert calls.failure_of(node.pk) is None
