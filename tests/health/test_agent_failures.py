"""A server error answered to a tray's agent is recorded for the portal's health (which
call, why), and only for the tray whose token made the call. The failure is real: a column
the facts update reads is gone, as after a migration that did not run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client

from domains.agents.joining import agent_join
from domains.health import calls
from domains.inventory.models import NodeCondition
from tests import factories
from tests.support.agents import ensure_join_token, node_facts

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
