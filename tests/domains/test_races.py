"""Twenty requests at once for the last quota and the last trays: the database decides.

Real threads, each on its own PostgreSQL connection, released together by a barrier.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from domains.audit.events import Actor
from domains.computedomains.models import ChannelAllocation, ComputeDomain, DomainMember, Phase
from domains.computedomains.placing import domain_place
from domains.computedomains.services import domain_request
from domains.computedomains.specs import DomainSpec
from domains.errors import QuotaExceeded
from testbed import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
THREADS = 20


def race(work: Callable[[int], Any]) -> list[Any]:
    """Run work(0..THREADS-1) in threads that start together; results or exceptions."""
    barrier = threading.Barrier(THREADS)
    results: list[Any] = [None] * THREADS

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # the outcome under test, collected for the asserts
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_concurrent_requests_never_exceed_the_quota():
    factories.make_racks("18", ip_prefix="127.11")
    ns = factories.make_namespace("racers", max_nodes=10, max_gpus=400)
    user = factories.make_user("racer")
    actor = Actor.for_user(user)

    results = race(
        lambda i: domain_request(
            actor=actor, namespace=ns, spec=DomainSpec(name=f"d{i}", num_nodes=2)
        )
    )

    admitted = [r for r in results if isinstance(r, ComputeDomain)]
    refused = [r for r in results if isinstance(r, QuotaExceeded)]
    assert (len(admitted), len(refused)) == (5, 15), results
    assert all(
        "trays: 10 in use + 2 requested exceeds the quota of 10" in r.message for r in refused
    )
    assert ComputeDomain.objects.filter(namespace=ns).count() == 5


def test_concurrent_placements_never_double_book_a_tray_or_a_channel():
    factories.make_racks("18", ip_prefix="127.11")
    ns = factories.make_namespace("racers")
    actor = Actor.for_user(factories.make_user("racer"))
    ids = [
        domain_request(actor=actor, namespace=ns, spec=DomainSpec(name=f"d{i}", num_nodes=2)).pk
        for i in range(THREADS)
    ]

    results = race(lambda i: domain_place(domain_id=ids[i]))

    assert not [r for r in results if isinstance(r, Exception)], results
    phases = sorted(ComputeDomain.objects.values_list("phase", flat=True))
    assert phases.count(Phase.FORMING) == 9  # 18 trays, 2 each
    assert phases.count(Phase.ADMITTED) == 11
    held = list(DomainMember.objects.filter(active=True).values_list("node_id", flat=True))
    assert len(held) == len(set(held)) == 18
    channels = sorted(ChannelAllocation.objects.values_list("channel", flat=True))
    assert channels == list(range(1, 10))
    queued = ComputeDomain.objects.filter(phase=Phase.ADMITTED)
    assert all(d.message.startswith("needs 2 free trays in one clique") for d in queued)
