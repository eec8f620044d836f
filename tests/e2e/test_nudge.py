"""The agents' websocket: a node token joins its tray's group and hears only "changed"."""

from __future__ import annotations

import json

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from domains import signals
from domains.agents.joining import agent_join
from domains.inventory.models import Node
from testbed import factories
from testbed.agents import ensure_join_token, node_facts
from tests.e2e.conftest import IP_PREFIX

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def ws_url(portal: str) -> str:
    return portal.replace("http://", "ws://") + "/ws/agent/"


def test_a_desired_state_change_nudges_only_that_trays_agent(portal):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    first, second = Node.objects.filter(rack=rack).order_by("slot")
    token = ensure_join_token()
    _, raw_first = agent_join(join_token=token, facts=node_facts(first))
    _, raw_second = agent_join(join_token=token, facts=node_facts(second))
    headers = {"Authorization": f"Node {raw_first}"}
    other = {"Authorization": f"Node {raw_second}"}
    with (
        connect(ws_url(portal), additional_headers=headers) as ws,
        connect(ws_url(portal), additional_headers=other) as ws_other,
    ):
        signals.desired_state_changed.send(sender=Node, node_ids=[first.pk])
        assert json.loads(ws.recv(timeout=5)) == {"type": "desired_state_changed"}
        with pytest.raises(TimeoutError):
            ws_other.recv(timeout=0.5)


def test_the_agent_socket_refuses_a_bad_token(portal):
    with pytest.raises(InvalidStatus):
        connect(ws_url(portal), additional_headers={"Authorization": "Node dpn_nope"}).close()
    with pytest.raises(InvalidStatus):
        connect(ws_url(portal)).close()
