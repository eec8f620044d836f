"""An agent whose desired-state fetch fails tells the portal so, in its reports.

A real server, a real agent process on an emulated tray. The portal's desired-state read is
broken the way a bug or a migration that did not run breaks it (a column the query names is
gone: every fetch answers 500), while the report path keeps working.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from domains.computedomains.models import ChannelAllocation
from domains.inventory.models import Node
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from tests.e2e.conftest import IP_PREFIX

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def rename_channel_column(old: str, new: str) -> None:
    table = ChannelAllocation._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{old}" TO "{new}"')


def test_a_failing_desired_state_is_in_the_agents_reports_until_it_is_served_again(portal):
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    node = Node.objects.filter(rack=rack).order_by("slot").first()

    def report() -> dict[str, Any]:
        node.refresh_from_db()
        return node.agent_report or {}

    with AgentFleet(portal, [node], poll_interval=1.0) as fleet:
        fleet.wait_joined()
        wait_for(lambda: report().get("step") == "idle", 30, "a first report")
        assert report()["link_error"] == ""

        rename_channel_column("channel", "channel_gone")
        try:
            wait_for(
                lambda: report()["link_error"].startswith(
                    "desired state: HTTP 500 Internal Server Error"
                ),
                30,
                "the failed fetch in a report",
            )
            assert report()["step"] == "idle"  # the tray keeps what it holds
        finally:
            rename_channel_column("channel_gone", "channel")
        wait_for(lambda: report()["link_error"] == "", 30, "the failure cleared")
