"""Writes safe to run again (portal.outage, docs/reliability.md): an `Idempotency-Key` answered
once is answered again from its receipt, and a write whose connection was lost during COMMIT
is settled by its receipt, never answered 5xx and never done twice.

The real restarts are in tests/e2e/test_postgres_away.py; here the connection is lost at the
one moment a restart cannot be aimed at: COMMIT itself, once after the server committed and
once before.
"""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection

from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain, Phase
from domains.tenancy.models import ApiToken
from portal.receipts.models import WriteReceipt

CD = "/api/v1/namespaces/team-a/computedomains/"


def body(name: str, nodes: int = 1) -> dict:
    return {"metadata": {"name": name}, "spec": {"numNodes": nodes}}


@pytest.fixture
def member(clients):
    return clients["member"]


def test_a_key_answered_once_is_answered_again_from_its_receipt(member, fabric) -> None:
    first = member.post(CD, body("once"), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = member.post(CD, body("once"), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201, again.content
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert again.json() == first.json()
    assert ComputeDomain.objects.filter(name="once").count() == 1
    assert Event.objects.filter(verb="domain.requested").count() == 1

    # Without the key the same request is a new one: the name is taken.
    assert member.post(CD, body("once"), format="json").status_code == 409
    # The release too: answered once, replayed after.
    gone = [member.delete(f"{CD}once", HTTP_IDEMPOTENCY_KEY="d-1") for _ in range(2)]
    assert [r.status_code for r in gone] == [202, 202]
    assert gone[1]["Idempotent-Replayed"] == "true"
    assert ComputeDomain.objects.get(name="once").phase == Phase.RELEASED


def test_a_key_reused_for_another_request_is_refused_naming_the_header(member, fabric) -> None:
    assert member.post(CD, body("a"), format="json", HTTP_IDEMPOTENCY_KEY="k").status_code == 201
    other = member.post(CD, body("b"), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert other.status_code == 422
    assert other.json()["field"] == "Idempotency-Key"
    assert not ComputeDomain.objects.filter(name="b").exists()
    bad = member.post(CD, body("c"), format="json", HTTP_IDEMPOTENCY_KEY="x" * 256)
    assert bad.status_code == 422 and bad.json()["field"] == "Idempotency-Key"


def test_a_key_counts_only_for_the_credential_that_sent_it(clients, fabric) -> None:
    a = clients["member"].post(CD, body("mine"), format="json", HTTP_IDEMPOTENCY_KEY="same")
    b = clients["other_tenant"].post(
        "/api/v1/namespaces/team-b/computedomains/",
        body("theirs"),
        format="json",
        HTTP_IDEMPOTENCY_KEY="same",
    )
    assert (a.status_code, b.status_code) == (201, 201)
    assert "Idempotent-Replayed" not in b and b.json()["metadata"]["name"] == "theirs"


def test_a_refused_write_leaves_no_receipt(member, fabric) -> None:
    refused = member.post(CD, body("huge", 99), format="json", HTTP_IDEMPOTENCY_KEY="big")
    assert refused.status_code in (400, 422)
    assert not WriteReceipt.objects.exists()  # a retry with the same key is tried afresh


def lose_commit(monkeypatch, *, after_committing: bool) -> list[str]:
    """The first COMMIT loses its connection: after the server committed, or before."""
    real_commit = connection.commit
    seen: list[str] = []

    def commit() -> None:
        if not seen:
            seen.append("lost")
            if after_committing:
                real_commit()
            else:
                connection.rollback()
            raise OperationalError("server closed the connection unexpectedly")
        seen.append("ok")
        real_commit()

    monkeypatch.setattr(connection, "commit", commit)
    return seen


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("after_committing", [True, False], ids=["committed", "not-committed"])
@pytest.mark.parametrize("key", ["", "client-key"], ids=["server-key", "client-key"])
def test_a_connection_lost_during_commit_is_settled_by_the_receipt(
    member, fabric, monkeypatch, after_committing, key
) -> None:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    seen = lose_commit(monkeypatch, after_committing=after_committing)
    created = member.post(CD, body("commit"), format="json", **headers)
    assert seen[0] == "lost"
    assert created.status_code == 201, created.content  # not 503, not 409 "exists"
    assert created.json()["metadata"]["name"] == "commit"
    assert ComputeDomain.objects.filter(name="commit").count() == 1
    requested = Event.objects.filter(verb="domain.requested")
    assert requested.count() == 1  # done once: no half-made second attempt
    assert WriteReceipt.objects.count() == 1

    seen.clear()
    headers = {"HTTP_IDEMPOTENCY_KEY": f"{key}-release"} if key else {}
    released = member.delete(f"{CD}commit", **headers)
    assert released.status_code == 202, released.content
    assert ComputeDomain.objects.get(name="commit").phase == Phase.RELEASED
    assert Event.objects.filter(verb="domain.released").count() == 1


def test_a_new_tokens_secret_is_never_kept_in_a_receipt(member) -> None:
    """The secret is shown once: a retry under the same key learns the token was made (409,
    naming the header), not the secret, and no second token is made."""
    url = "/api/v1/tokens/"
    made = member.post(url, {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="tok-1")
    assert made.status_code == 201, made.content
    secret = made.json()["token"]
    assert made["Cache-Control"] == "no-store"
    receipt = WriteReceipt.objects.get()
    assert receipt.withheld and bytes(receipt.body) == b"" and secret not in str(receipt.headers)

    again = member.post(url, {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="tok-1")
    assert again.status_code == 409 and again.json()["field"] == "Idempotency-Key"
    assert secret not in again.content.decode()
    assert ApiToken.objects.filter(name="ci").count() == 1


def test_a_write_without_a_key_keeps_no_answer(member, fabric) -> None:
    assert member.post(CD, body("plain"), format="json").status_code == 201
    receipt = WriteReceipt.objects.get()
    assert bytes(receipt.body) == b"" and receipt.headers == {} and not receipt.withheld


def test_receipts_are_kept_a_day(member, fabric) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from portal.receipts.tasks import purge_receipts

    member.post(CD, body("kept"), format="json", HTTP_IDEMPOTENCY_KEY="old")
    member.post(CD, body("fresh"), format="json", HTTP_IDEMPOTENCY_KEY="new")
    old = WriteReceipt.objects.order_by("pk").first()
    assert old is not None
    WriteReceipt.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=25))
    assert purge_receipts() == 1
    assert WriteReceipt.objects.count() == 1
