"""A domain chosen on the Fleet page (`?domain=<uid or namespace/name>`, or the domain
page's "Show on the fleet"): its trays' cells outlined on every rack it spans, those racks
first, a line naming them and its cliques, the elevations framing its trays, each tile
saying which domain holds each cell; the same queries as without it; operators only."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from django.urls import reverse

from domains.audit.events import Actor
from domains.inventory.services import node_cordon
from testbed import factories
from tests.support.lifecycle import all_ready, request_and_place
from tests.web.test_fleet import _queries

pytestmark = pytest.mark.django_db

TILE = re.compile(
    r'<a class="hm( hm-in)?" href="[^"]*" data-rack="([^"]+)"'
    r'(?: data-d="([^"]*)" data-h="([^"]*)")?'
)


@pytest.fixture
def wide(tenant_a, operator):
    """Three racks of one 18-tray clique; the first all cordoned, so a 27-tray domain
    spans the other two (and is not already first on the page), and a 2-tray one beside."""
    racks = factories.make_racks("18", "18", "18")
    for node in racks[0].nodes.all():
        node_cordon(actor=Actor.for_user(operator), node=node)
    namespace = factories.make_namespace("team-big")
    factories.add_member(tenant_a, namespace, "member")
    domain = all_ready(request_and_place(namespace, tenant_a, name="wide", num_nodes=27))
    other = all_ready(request_and_place(namespace, tenant_a, name="small", num_nodes=2))
    return domain, other, [r.name for r in racks]


def tiles(body: str) -> list[tuple[bool, str, list[str]]]:
    """(outlined, rack, the namespace/name holding each cell or "") of every heat-map tile,
    in order, read as the page's script reads them."""
    script = body.split('<script id="hm-domains" type="application/json">', 1)[1]
    groups = json.loads(script.split("</script>", 1)[0])
    labels = [f"{namespace}/{name}" for namespace, names in groups for name in names]
    found = []
    for outlined, rack, ids, cells in TILE.findall(body):
        theirs = [labels[int(i)] for i in ids.split()]
        held = [theirs[ord(c) - 97] if c != "." else "" for c in cells]
        found.append((bool(outlined), rack, held))
    return found


def outlined_cells(body: str, rack: str) -> int:
    heatmap = body.split('<div class="heatmap" id="heatmap">', 1)[1]
    tile = heatmap.split(f'data-rack="{rack}"', 1)[1].split("</a>", 1)[0]
    return len(re.findall(r'<i class="[^"]* m" title="team-big/wide: ', tile))


@pytest.mark.parametrize("how", ["uid", "name"])
def test_a_domain_over_two_racks_is_outlined_on_both_and_they_come_first(
    client, operator, wide, how
):
    domain, _, (cordoned, *spanned) = wide
    client.force_login(operator)
    chosen = str(domain.uid) if how == "uid" else "team-big/wide"
    body = client.get(reverse("operator:fabric"), {"domain": chosen}).content.decode()
    line = body.split('id="fleet-domain"', 1)[1].split("</p>", 1)[0]
    assert 'data-racks="2" data-cliques="2"' in line
    assert "spans 2 racks:" in line and "2 NVLink cliques, 27 trays" in line
    assert re.findall(r'data-rack="([^"]+)">', line) == spanned
    order = tiles(body)
    assert [(outlined, rack) for outlined, rack, _ in order] == [
        (True, spanned[0]),
        (True, spanned[1]),
        (False, cordoned),
    ]
    assert outlined_cells(body, spanned[0]) + outlined_cells(body, spanned[1]) == 27
    assert outlined_cells(body, cordoned) == 0
    # Not colour only: the tiles it spans say so in words, for a screen reader too.
    assert body.count(": 18 trays of team-big/wide</span>") == 1
    assert body.count(": 9 trays of team-big/wide</span>") == 1
    # The elevations (every rack fits one page) frame its 27 trays, and only those.
    assert len(re.findall(r'<g class="t [^"]* highlight', body)) == 27


def test_each_cell_names_the_domain_holding_it_for_hover_and_focus(client, operator, wide):
    names = wide[2]
    client.force_login(operator)
    body = client.get(reverse("operator:fabric"), {"domain": "team-big/small"}).content.decode()
    held = Counter(label for _, _, cells in tiles(body) for label in cells if label)
    assert held == {"team-big/wide": 27, "team-big/small": 2}
    cells = {rack: cells for _, rack, cells in tiles(body)}
    assert cells[names[0]] == []  # the cordoned rack: no domain holds a cell of it


def test_an_unknown_domain_is_said_and_outlines_nothing(client, operator, wide):
    client.force_login(operator)
    body = client.get(reverse("operator:fabric"), {"domain": "team-big/gone"}).content.decode()
    line = body.split('id="fleet-domain"', 1)[1].split("</p>", 1)[0]
    assert 'no live domain "team-big/gone" holds trays' in line
    assert not re.search(r'<i class="[^"]* m"', body) and 'class="hm hm-in"' not in body
    assert [rack for _, rack, _ in tiles(body)] == wide[2]  # the fleet's own order


def test_the_domain_suggestions_list_the_domains_over_several_racks(client, operator, wide):
    client.force_login(operator)
    body = client.get(reverse("operator:fabric")).content.decode()
    options = body.split('<datalist id="fleet-domains">', 1)[1].split("</datalist>", 1)[0]
    assert options == '<option value="team-big/wide">spans 2 racks</option>'


def test_outlining_a_domain_costs_no_query_more(client, operator, wide):
    client.force_login(operator)
    url = reverse("operator:fabric")
    assert _queries(client, f"{url}?domain=team-big/wide") == _queries(client, url)
    assert _queries(client, f"{url}?domain=team-big/gone&state=free") == _queries(
        client, f"{url}?state=free"
    )


def test_show_on_the_fleet_is_an_operators_link_and_the_fleet_stays_theirs(
    client, operator, tenant_a, wide
):
    domain = wide[0]
    page = reverse("tenant:domain", args=["team-big", domain.uid])
    client.force_login(tenant_a)
    assert 'id="show-on-fleet"' not in client.get(page).content.decode()
    fleet = reverse("operator:fabric") + f"?domain={domain.uid}"
    assert client.get(fleet).status_code == 403
    client.force_login(operator)
    link = client.get(page).content.decode().split('id="show-on-fleet"', 1)[0]
    assert link.rsplit('href="', 1)[1].startswith(fleet)
