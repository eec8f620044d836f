"""A domain over several racks in the pages: the request form's preview says how many racks
and cliques it would use and draws every one of them; the domain's page (the tenant's and
an operator's) has a row per clique (its rack, trays, ready count, channel) and draws
every rack it runs in."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from domains.audit.events import Actor
from domains.computedomains.models import ChannelAllocation, Phase
from domains.computedomains.services import domain_release
from tests.support.lifecycle import all_clean, all_ready, request_and_place

pytestmark = pytest.mark.django_db


def drawn_racks(body: str) -> list[str]:
    return re.findall(r'class="rack-card rack-big" data-rack="([^"]+)"', body)


def test_the_preview_of_27_trays_over_2_racks_names_both_and_draws_both(
    client, two_racks, team_big, tenant_a
):
    client.force_login(tenant_a)
    form = {
        "name": "wide",
        "size": "trays",
        "num_nodes": 27,
        "span_racks": 2,
        "allocation_mode": "Single",
        "placement_constraint": "any",
    }
    body = client.post(reverse("tenant:preview", args=[team_big.name]), form).content.decode()
    assert 'data-preview="ok"' in body
    span = body.split('id="preview-span"', 1)[1].split("</div>", 1)[0]
    assert 'data-racks="2" data-cliques="2"' in span
    names = sorted(r.name for r in two_racks)
    assert "2 racks</strong> (" + ", ".join(names) + ")" in span
    assert "2 NVLink cliques" in span
    assert sorted(drawn_racks(body)) == names  # every rack it would span, not only one
    drawings = body.split('<div class="rack-row">', 1)[1]
    assert drawings.count("▶ lands here") == 27  # every tray it would get, in both racks


def test_the_preview_of_one_clique_says_nothing_of_spanning(client, two_racks, team_big, tenant_a):
    client.force_login(tenant_a)
    form = {"name": "small", "num_nodes": 4, "allocation_mode": "Single"}
    body = client.post(
        reverse("tenant:preview", args=[team_big.name]), form | {"placement_constraint": "any"}
    ).content.decode()
    assert 'data-preview="ok"' in body and 'id="preview-span"' not in body
    assert len(drawn_racks(body)) == 1


def test_a_span_asked_of_a_domain_that_follows_its_workload_is_refused_on_its_field(
    client, two_racks, team_big, tenant_a
):
    client.force_login(tenant_a)
    form = {"name": "follow", "size": "workload", "span_racks": 2}
    form |= {"allocation_mode": "Single", "placement_constraint": "any"}
    resp = client.post(reverse("tenant:request", args=[team_big.name]), form)
    error = resp.content.decode().split('id="id_span_racks-errors"', 1)[1].split("</ul>", 1)[0]
    assert "only a placed domain" in error


def test_a_request_with_span_racks_places_the_domain_over_that_many_racks(
    client, two_racks, team_big, tenant_a
):
    client.force_login(tenant_a)
    form = {"name": "even", "size": "trays", "num_nodes": 4, "span_racks": 2}
    form |= {"allocation_mode": "Single", "placement_constraint": "any"}
    resp = client.post(reverse("tenant:request", args=[team_big.name]), form)
    assert resp.status_code == 302
    domain = team_big.domains.get(name="even")
    assert (domain.span_racks, domain.span_cliques) == (2, 0)


@pytest.mark.parametrize("who", ["tenant", "operator"])
def test_a_domain_over_two_racks_shows_a_row_per_clique_and_draws_both_racks(
    client, two_racks, team_big, tenant_a, operator, who
):
    domain = all_ready(request_and_place(team_big, tenant_a, name="wide", num_nodes=27))
    assert domain.phase == Phase.READY
    client.force_login(tenant_a if who == "tenant" else operator)
    body = client.get(reverse("tenant:domain", args=[team_big.name, domain.uid])).content.decode()
    table = body.split('<table id="cliques">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr data-clique="([^"]+)" data-ready="(\d+)" data-trays="(\d+)">', table)
    assert sorted((int(r), int(t)) for _, r, t in rows) == [(9, 9), (18, 18)]
    channels = ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True)
    assert len(channels) == 2
    for held in channels.select_related("clique__rack"):
        row = table.split(f'data-clique="{held.clique.label}"', 1)[1].split("</tr>", 1)[0]
        assert f"<td>{held.clique.rack.name}</td>" in row and f"<td>{held.channel}</td>" in row
    assert "18 of 18 ready" in table and "9 of 9 ready" in table
    assert "2 NVLink cliques over 2 racks" in body
    held = sorted({c.channel for c in channels})
    said = body.split('id="domain-channels">', 1)[1].split("</dd>", 1)[0]
    assert said.startswith(
        ("channel " if len(held) == 1 else "channels ") + ", ".join(map(str, held))
    )
    assert "one in each clique" in said
    assert sorted(drawn_racks(body)) == sorted(r.name for r in two_racks)


def test_a_domain_in_one_clique_has_no_clique_rows(client, two_racks, team_big, tenant_a):
    domain = all_ready(request_and_place(team_big, tenant_a, name="one", num_nodes=4))
    client.force_login(tenant_a)
    body = client.get(reverse("tenant:domain", args=[team_big.name, domain.uid])).content.decode()
    assert 'id="cliques"' not in body and 'id="domain-clique"' in body


def test_request_again_asks_for_the_same_span(client, two_racks, team_big, tenant_a):
    placed = request_and_place(team_big, tenant_a, name="even", num_nodes=4, span_racks=2)
    domain = all_ready(placed)
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    all_clean(domain)
    client.force_login(tenant_a)
    body = client.get(reverse("tenant:domain", args=[team_big.name, domain.uid])).content.decode()
    again = body.split('id="request-again"', 1)[0].rsplit('href="', 1)[1].split('"', 1)[0]
    assert "span_racks=2" in again and "num_nodes=4" in again
    form = client.get(again.replace("&amp;", "&")).content.decode()
    assert re.search(r'name="span_racks" value="2"', form)
