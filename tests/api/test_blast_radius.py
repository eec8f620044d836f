"""The blast radius API: what losing a tray, rack, clique, switch tray or power shelf would
hit, with other tenants' domains folded into counts for tenants."""

from __future__ import annotations

import pytest

from domains.inventory.models import Node, PowerShelf, SwitchTray


@pytest.fixture
def both(fabric, domain_a, domain_b):
    return fabric


def test_a_tenant_sees_its_own_domain_by_name_and_the_others_only_as_counts(clients, both):
    body = clients["member"].get(f"/api/v1/racks/{both.name}/blast-radius").json()
    assert body["hit"] == "down" and body["scope"] == {"kind": "rack", "name": both.name}
    assert [d["name"] for d in body["domains"]] == ["train-a"]
    assert body["tenants"] == ["team-a"]
    assert body["otherTenants"] == {"trays": 2, "gpus": 8}
    assert (
        b"secret-b" not in clients["member"].get(f"/api/v1/racks/{both.name}/blast-radius").content
    )
    hit = body["domains"][0]
    assert hit["effect"] == "loses all 2 trays (8 GPUs)" and hit["traysTotal"] == 2


def test_an_operator_sees_every_domain_and_tenant(clients, both):
    body = clients["operator"].get(f"/api/v1/racks/{both.name}/blast-radius").json()
    assert {d["name"] for d in body["domains"]} == {"train-a", "secret-b"}
    assert body["tenants"] == ["team-a", "team-b"]
    assert body["otherTenants"] == {"trays": 0, "gpus": 0} and body["gpusHit"] == 16
    assert len(body["traysDown"]) == 18 and body["gpusDown"] == 72


def test_a_tray_of_another_tenant_reads_as_anonymous_trays(clients, both, domain_b):
    host = domain_b.members.order_by("index").first().node.hostname
    body = clients["member"].get(f"/api/v1/nodes/{host}/blast-radius").json()
    assert body["domains"] == [] and body["tenants"] == []
    assert body["otherTenants"] == {"trays": 1, "gpus": 4}
    assert body["summary"]  # the operator's sentence, which names no one


def test_a_switch_tray_means_bandwidth_and_a_power_shelf_redundancy(clients, both):
    switch = clients["operator"].get(f"/api/v1/switchtrays/{both.name}-s03/blast-radius").json()
    assert switch["hit"] == "bandwidth" and switch["bandwidthLoss"] == pytest.approx(1 / 9)
    assert {d["hit"] for d in switch["domains"]} == {"bandwidth"}
    shelf = clients["member"].get(f"/api/v1/powershelves/{both.name}-p8/blast-radius").json()
    assert shelf["hit"] == "redundancy" and shelf["domains"] == []
    assert shelf["power"]["spareShelves"] == 3 and shelf["power"]["carried"] is True


def test_operators_record_a_part_down_and_the_radius_follows(clients, both):
    for position in (1, 2, 3, 4):
        response = clients["operator"].post(
            f"/api/v1/powershelves/{both.name}-p{position}/state/",
            {"state": "down", "reason": "PSU swap"},
            format="json",
        )
        assert response.status_code == 200 and response.json()["state"] == "down"
    assert PowerShelf.objects.filter(state="down").count() == 4
    short = clients["operator"].get(f"/api/v1/powershelves/{both.name}-p5/blast-radius").json()
    assert short["hit"] == "down" and short["power"]["carried"] is False
    listed = clients["member"].get("/api/v1/powershelves/").json()["results"]
    assert {s["stateReason"] for s in listed} == {""}  # an operator's reason is for operators


def test_a_bad_state_names_the_field_and_changes_nothing(clients, both):
    response = clients["operator"].post(
        f"/api/v1/switchtrays/{both.name}-s01/state/", {"state": "melted"}, format="json"
    )
    assert response.status_code == 400 and response.json()["field"] == "state"
    assert not SwitchTray.objects.filter(state="down").exists()


def test_unknown_parts_are_not_found(clients, both):
    for url in ("/api/v1/switchtrays/nope/blast-radius", "/api/v1/nodes/nope/blast-radius"):
        response = clients["member"].get(url)
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert Node.objects.count() == 18
