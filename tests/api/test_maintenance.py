"""The maintenance API: operators schedule and call off windows; everyone signed in reads
them with the domains already there, other tenants' domains only counted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from domains.audit.models import Event
from domains.inventory.models import MaintenanceWindow


def body(**over):
    start = timezone.now() + timedelta(hours=2)
    data = {
        "rack": "gb-r01",
        "startsAt": start.isoformat(),
        "endsAt": (start + timedelta(hours=3)).isoformat(),
        "reason": "liquid cooling manifold check",
    }
    data.update(over)
    return data


@pytest.fixture
def window(clients, fabric, domain_a, domain_b):
    response = clients["operator"].post("/api/v1/maintenance/", body(), format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_an_operator_schedules_a_rack_and_sees_every_domain_there(window):
    assert window["scope"] == "rack" and window["target"] == "gb-r01"
    assert len(window["trays"]) == 18
    assert {d["name"] for d in window["domains"]} == {"train-a", "secret-b"}
    assert window["tenants"] == ["team-a", "team-b"] and window["otherDomains"] == 0
    assert Event.objects.filter(verb="domain.maintenance_scheduled").count() == 2


def test_a_tenant_reads_its_own_domains_and_a_count_of_the_rest(clients, window):
    listed = clients["member"].get("/api/v1/maintenance/").json()["results"]
    (mine,) = listed
    assert [d["name"] for d in mine["domains"]] == ["train-a"] and mine["otherDomains"] == 1
    assert b"secret-b" not in clients["member"].get(f"/api/v1/maintenance/{window['id']}/").content


def test_tenants_may_not_schedule_or_call_off(clients, window):
    assert clients["member"].post("/api/v1/maintenance/", body(), format="json").status_code == 403
    cancel = clients["admin"].post(f"/api/v1/maintenance/{window['id']}/cancel/")
    assert cancel.status_code == 200 and cancel.json()["cancelledAt"]
    assert clients["member"].get("/api/v1/maintenance/").json()["results"] == []


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"reason": " "}, "reason"),
        ({"rack": "r99"}, "rack"),
        ({"rack": "", "trays": ["ghost"]}, "trays"),
        ({"endsAt": "2000-01-01T00:00:00Z"}, "endsAt"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_input_names_the_field(clients, fabric, over, field):
    response = clients["operator"].post("/api/v1/maintenance/", body(**over), format="json")
    assert response.status_code == 400 and response.json()["field"] == field
    assert not MaintenanceWindow.objects.exists()


def test_extending_a_lease_into_a_window_is_refused_naming_the_field(clients, window, domain_a):
    response = clients["member"].post(
        "/api/v1/namespaces/team-a/computedomains/train-a/extend/", {"by": "48h"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "maintenance_conflict" and response.json()["field"] == "by"


def test_the_list_costs_the_same_queries_for_one_window_and_three(clients, fabric, domain_a):
    client = clients["operator"]
    client.post("/api/v1/maintenance/", body(), format="json")

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/api/v1/maintenance/").status_code == 200
        return len(ctx.captured_queries)

    one = count()
    client.post(
        "/api/v1/maintenance/", body(rack="", clique=fabric.cliques.get().label), format="json"
    )
    client.post("/api/v1/maintenance/", body(rack="", trays=["gb-r01-t05"]), format="json")
    assert count() == one
