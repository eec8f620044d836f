"""A request awaiting an admin's approval reserves quota, not shown as in use, and says
what it waits for in its own column."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.tenancy.models import Quota
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


@pytest.fixture
def awaiting_approval(topology, tenant_a, ns_a):
    Quota.objects.filter(namespace=ns_a).update(approval_above_nodes=8)
    form(request_domain(ns_a, tenant_a, "small", num_nodes=3))
    return request_domain(ns_a, tenant_a, "big", num_nodes=9)


def test_the_quota_bars_tell_what_runs_from_what_awaits_approval(
    client, tenant_a, awaiting_approval
):
    client.force_login(tenant_a)
    body = client.get(reverse("tenant:dashboard", args=["team-a"])).content.decode()
    assert "<strong>Trays</strong>: " in body
    assert '<span data-part="running">3 in use</span>' in body
    assert '<span data-part="reserved">9 reserved (awaiting approval)</span> of 12' in body
    trays = body[body.index('data-quota="trays"') :][:600]
    assert "3 in use" in trays and "12 in use" not in trays
    assert 'class="reserved w75"' in body  # 9 of 12, hatched after the 3 that run


def test_an_over_quota_request_names_what_is_reserved_apart_from_what_runs(
    client, tenant_a, awaiting_approval
):
    client.force_login(tenant_a)
    url = reverse("tenant:request", args=["team-a"])
    resp = client.post(
        url,
        {
            "name": "more",
            "num_nodes": 1,
            "allocation_mode": "Single",
            "placement_constraint": "any",
        },
    )
    body = resp.content.decode()
    assert "trays: 3 in use + 9 reserved (awaiting approval) + 1 requested exceeds" in body, body


def test_a_request_awaiting_approval_says_it_waits_for_an_admin_in_its_own_column(
    client, tenant_a, ns_a, awaiting_approval
):
    Quota.objects.filter(namespace=ns_a).update(max_nodes=18, max_gpus=72)
    request_domain(ns_a, tenant_a, "queued", num_nodes=1)  # Admitted: not placed yet
    client.force_login(tenant_a)
    body = client.get(reverse("tenant:dashboard", args=["team-a"])).content.decode()
    live = body.split('id="quota-h"', 1)[1]
    assert '<th scope="col">Waiting for</th><th scope="col">Lease ends (UTC)</th>' in live

    def cells(name: str) -> tuple[str, str]:
        row = live.split(f'<tr data-domain="{name}">', 1)[1].split("</tr>", 1)[0]
        queue = row.split('<td class="queue">', 1)[1].split("</td>", 1)[0]
        when = row.split('<td class="when">', 1)[1].split("</td>", 1)[0]
        return queue, when

    queue, when = cells("big")
    assert "an admin's approval" in queue and "placed as soon as" not in when
    queue, when = cells("queued")
    assert "placement, #1 in the queue" in queue and "placed" not in when
    assert cells("small")[0] == '<span class="muted">—</span>'


def test_the_domains_list_says_none_were_requested_rather_than_that_filters_match_none(
    client, operator
):
    client.force_login(operator)
    assert (
        "No domain has been requested yet."
        in client.get(reverse("operator:domains")).content.decode()
    )
    filtered = client.get(reverse("operator:domains") + "?q=nothing").content.decode()
    assert "No domains match these filters." in filtered


def test_the_request_form_says_how_many_trays_can_be_asked_for_and_what_is_reserved(
    client, tenant_a, ns_a, awaiting_approval
):
    client.force_login(tenant_a)
    url = reverse("tenant:request", args=["team-a"])
    line = client.get(url).content.decode().split('id="headroom">', 1)[1].split("</p>", 1)[0]
    assert "You cannot request a domain now" in line
    assert "9 reserved by big awaiting approval" in line
    assert "More than 8 trays needs an admin's approval." in line
    Quota.objects.filter(namespace=ns_a).update(max_nodes=18, max_gpus=72)
    line = client.get(url).content.decode().split('id="headroom">', 1)[1].split("</p>", 1)[0]
    assert 'up to <strong id="headroom-trays">6 trays</strong> now' in line
