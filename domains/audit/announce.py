"""Announcing changes, after commit, to whoever listens (`domains.signals`).

Each announcement waits for the surrounding transaction to commit, so nobody hears of a
change that rolled back, and a listener that reads the database sees the change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import transaction

from domains import signals

if TYPE_CHECKING:  # for annotations only: every app imports this module, not the reverse
    from domains.computedomains.models import ComputeDomain


def announce_domain(domain: ComputeDomain) -> None:
    """This domain's status changed."""
    sender, uid, ns_id, phase = type(domain), str(domain.uid), domain.namespace_id, domain.phase
    transaction.on_commit(
        lambda: signals.domain_changed.send(
            sender=sender, domain_uid=uid, namespace_id=ns_id, phase=phase
        )
    )


def announce_nodes(node_ids: Iterable[int]) -> None:
    """These trays changed (state, membership)."""
    ids = sorted(set(node_ids))
    if ids:
        transaction.on_commit(lambda: signals.node_changed.send(sender=None, node_ids=ids))


def announce_desired_state(node_ids: Iterable[int]) -> None:
    """These trays' agents must fetch their desired state now."""
    ids = sorted(set(node_ids))
    if ids:
        transaction.on_commit(lambda: signals.desired_state_changed.send(sender=None, node_ids=ids))


def announce_placement_wanted(domain_id: int) -> None:
    """This domain was admitted and waits to be placed."""
    transaction.on_commit(lambda: signals.placement_wanted.send(sender=None, domain_id=domain_id))


def announce_capacity_freed() -> None:
    """Trays or channels came free (or back into the pool): queued domains may fit now."""
    transaction.on_commit(lambda: signals.capacity_freed.send(sender=None))
