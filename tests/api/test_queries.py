"""List endpoints cost a constant number of queries, however big the fabric (no N+1)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from domains.inventory.models import Node
from testbed import factories
from tests.api.conftest import IP_PREFIX, make_domain

LISTS = ["/api/v1/racks/", "/api/v1/cliques/", "/api/v1/nodes/", "/api/v1/events/"]
LISTS += ["/api/v1/switchtrays/", "/api/v1/powershelves/"]


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("role", ["member", "operator"])
def test_list_queries_do_not_grow_with_racks(clients, fabric, ns_a, ns_b, role, url) -> None:
    nodes = list(Node.objects.filter(rack=fabric).order_by("slot"))
    make_domain(ns_a, "a1", nodes=nodes[:2])
    client = clients[role]
    client.get(url)  # the token's first use of the minute also records last_used_at
    small = _queries(client, url)
    more = factories.make_racks("9,9", "18", ip_prefix=IP_PREFIX, first_rack=2)
    more_nodes = list(Node.objects.filter(rack__in=more).order_by("rack", "slot"))
    make_domain(ns_b, "b1", nodes=more_nodes[:3])
    make_domain(ns_a, "a2", nodes=more_nodes[3:5])
    assert _queries(client, url) == small
