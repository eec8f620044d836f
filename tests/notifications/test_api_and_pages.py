"""Subscriptions, the delivery log and the inbox through the API and the pages: each
person sees and changes only their own (anonymous, another user, the owner, an operator)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.audit.models import Event
from domains.notifications.dispatch import notify_event
from domains.notifications.models import Notification, Subscription
from domains.notifications.services import subscription_create
from portal.realtime.consumers import groups_for
from portal.realtime.groups import user_group
from tests.api.conftest import bearer_client
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


@pytest.fixture
def mine(tenant_a):
    return subscription_create(user=tenant_a, channel="webhook", kinds=["domain.ready"],
                               target="https://127.0.0.1:8443/portal")  # fmt: skip


@pytest.mark.parametrize(
    ("who", "list_code", "get_code"),
    [
        ("anonymous", 401, 401),
        ("tenant_b", 200, 404),
        ("operator", 200, 404),
        ("tenant_a", 200, 200),
    ],
)
def test_only_the_owner_reads_a_subscription_and_its_log(
    request, mine, tenant_b, operator, who, list_code, get_code
):
    user = None if who == "anonymous" else request.getfixturevalue(who)
    client = bearer_client(user)
    listed = client.get("/api/v1/subscriptions/")
    assert listed.status_code == list_code
    if list_code == 200:
        ids = [s["id"] for s in listed.json()["results"]]
        assert ids == ([mine.pk] if who == "tenant_a" else [])
    assert client.get(f"/api/v1/subscriptions/{mine.pk}/").status_code == get_code
    assert client.get(f"/api/v1/subscriptions/{mine.pk}/deliveries").status_code == get_code
    deleted = client.delete(f"/api/v1/subscriptions/{mine.pk}/")
    assert deleted.status_code == (204 if who == "tenant_a" else get_code)
    assert Subscription.objects.filter(pk=mine.pk).exists() == (who != "tenant_a")


def test_the_delivery_log_is_paged_like_every_list_newest_first(tenant_a, mine):
    for i in range(3):
        Notification.objects.create(
            subscription=mine, key=f"event:{i}", kind="domain.ready", title=f"t{i}"
        )
    client = bearer_client(tenant_a)
    first = client.get(f"/api/v1/subscriptions/{mine.pk}/deliveries/?limit=2")
    assert first.status_code == 200, first.content
    page = first.json()
    assert page["count"] == 3 and page["next"] and page["previous"] is None
    assert [d["title"] for d in page["results"]] == ["t2", "t1"]
    rest = client.get(f"/api/v1/subscriptions/{mine.pk}/deliveries/?limit=2&offset=2").json()
    assert [d["title"] for d in rest["results"]] == ["t0"] and rest["next"] is None
    bad = client.get(f"/api/v1/subscriptions/{mine.pk}/deliveries/?limit=-1")
    assert bad.status_code == 400 and bad.json()["field"] == "limit"


def test_the_owner_sees_the_webhook_secret_and_subscribes_through_the_api(tenant_a, mine):
    client = bearer_client(tenant_a)
    body = client.get(f"/api/v1/subscriptions/{mine.pk}/").json()
    assert body["secret"] == mine.secret and len(body["secret"]) == 64
    created = client.post(
        "/api/v1/subscriptions/",
        {"channel": "in_app", "kinds": ["domain.failed", "lease.ending"], "leaseWarningHours": 2},
        format="json",
    )
    assert created.status_code == 201 and created.json()["leaseWarningHours"] == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"channel": "pigeon", "kinds": ["domain.ready"]}, "channel"),
        ({"channel": "in_app", "kinds": []}, "kinds"),
        ({"channel": "webhook", "kinds": ["domain.ready"], "target": "gopher://x"}, "target"),
        ({"channel": "in_app", "kinds": ["domain.ready"], "namespace": "team-b"}, "namespace"),
        ({"channel": "in_app", "kinds": ["domain.ready"], "leaseWarningHours": 0},
         "leaseWarningHours"),
    ],
)  # fmt: skip
def test_bad_subscriptions_name_the_field(tenant_a, ns_b, body, field):
    response = bearer_client(tenant_a).post("/api/v1/subscriptions/", body, format="json")
    assert response.status_code == 400 and response.json()["field"].startswith(field)
    assert not Subscription.objects.exists()


def test_the_inbox_and_badge_are_the_owners_own(client, topology, ns_a, tenant_a, tenant_b):
    subscription_create(user=tenant_a, channel="in_app", kinds=["domain.ready"])
    subscription_create(user=tenant_b, channel="in_app", kinds=["domain.ready"])
    form(request_domain(ns_a, tenant_a, "train", num_nodes=2))
    for pk in Event.objects.values_list("pk", flat=True):
        notify_event(event_id=pk)
    inbox = bearer_client(tenant_a).get("/api/v1/notifications/?unread=true").json()["results"]
    assert [n["title"] for n in inbox] == ["team-a/train is Ready"]
    assert bearer_client(tenant_b).get("/api/v1/notifications/").json()["results"] == []
    client.force_login(tenant_a)
    badge = client.get(reverse("notifications_badge")).content.decode()
    assert 'id="unread-count"' in badge and ">1<" in badge
    page = client.get(reverse("notifications")).content.decode()
    assert "team-a/train is Ready" in page
    marked = bearer_client(tenant_a).post("/api/v1/notifications/read/", {}, format="json")
    assert marked.json() == {"marked": 1}
    assert 'id="unread-count"' not in client.get(reverse("notifications_badge")).content.decode()
    client.force_login(tenant_b)
    assert "team-a/train" not in client.get(reverse("notifications")).content.decode()


def test_pages_subscribe_show_the_log_and_hide_others_subscriptions(
    client, tenant_a, tenant_b, mine
):
    client.force_login(tenant_a)
    response = client.post(reverse("notifications"), {
        "channel": "email", "kinds": ["domain.failed"], "target": "", "namespace": "",
        "lease_warning_hours": 4, "maintenance_warning_hours": 24})  # fmt: skip
    assert response.status_code == 200 and "give an address" in response.content.decode()
    page = client.get(reverse("subscription", args=[mine.pk])).content.decode()
    assert mine.secret in page and 'id="delivery-log"' not in page  # nothing sent yet
    client.force_login(tenant_b)
    assert client.get(reverse("subscription", args=[mine.pk])).status_code == 404
    assert client.post(reverse("subscription_remove", args=[mine.pk])).status_code == 404
    client.logout()
    assert client.get(reverse("notifications")).status_code == 302


def test_the_live_socket_joins_only_the_users_own_group(tenant_a, tenant_b):
    assert groups_for(tenant_a, ["me"]) == [user_group(tenant_a.pk)]
    assert user_group(tenant_b.pk) not in groups_for(tenant_a, ["me", f"user.{tenant_b.pk}"])
