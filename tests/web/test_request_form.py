"""The request form takes one size, as chosen: a value the choice leaves out is refused
on its field, never silently dropped."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.computedomains.models import ComputeDomain

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"size": "trays", "num_nodes": 2, "gpus": 16}, "gpus", "size is in trays"),
        ({"size": "workload", "num_nodes": 2}, "num_nodes", "size follows the workload"),
        ({"size": "gpus", "num_nodes": 2, "gpus": 8}, "num_nodes", "size is in GPUs"),
    ],
)
def test_a_size_left_out_by_the_choice_is_refused_on_its_field_not_dropped(
    client, topology, tenant_a, fields, field, words
):
    client.force_login(tenant_a)
    data = {"name": "sized", "allocation_mode": "Single", "placement_constraint": "any"}
    resp = client.post(reverse("tenant:request", args=["team-a"]), data | fields)
    body = resp.content.decode()
    assert resp.status_code == 200 and not ComputeDomain.objects.filter(name="sized").exists()
    error = body.split(f'id="id_{field}-errors"', 1)[1].split("</ul>", 1)[0]
    assert words in error
