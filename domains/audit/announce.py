"""Announcing changes, after commit, to whoever listens (`domains.signals`).

Each announcement waits for the surrounding transaction to commit, so nobody hears of a
change that rolled back, and a listener that reads the database sees the change.

A listener that fails (the broker or the Channels layer away: Redis down) is logged and does
not fail the caller: the change is committed, and whatever the listener would have started is
picked up later by the periodic passes that read the database (docs/reliability.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.dispatch import Signal

from domains import signals

if TYPE_CHECKING:  # for annotations only: every app imports this module, not the reverse
    from domains.computedomains.models import ComputeDomain


def send_logged(signal: Signal, sender: Any = None, **kwargs: Any) -> None:
    """Send to every listener; one that raises is logged (by Django's `send_robust`, with its
    traceback, on the `django.dispatch` logger), never raised to the caller."""
    signal.send_robust(sender=sender, **kwargs)


def after_commit(signal: Signal, sender: Any = None, **kwargs: Any) -> None:
    """`send_logged` once the surrounding transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send_logged(signal, sender, **kwargs))


def announce_domain(domain: ComputeDomain) -> None:
    """This domain's status changed."""
    sender, uid, ns_id, phase = type(domain), str(domain.uid), domain.namespace_id, domain.phase
    after_commit(signals.domain_changed, sender, domain_uid=uid, namespace_id=ns_id, phase=phase)


def announce_nodes(node_ids: Iterable[int]) -> None:
    """These trays changed (state, membership)."""
    ids = sorted(set(node_ids))
    if ids:
        after_commit(signals.node_changed, node_ids=ids)


def announce_desired_state(node_ids: Iterable[int]) -> None:
    """These trays' agents must fetch their desired state now."""
    ids = sorted(set(node_ids))
    if ids:
        after_commit(signals.desired_state_changed, node_ids=ids)


def announce_member_reports(domain_id: int) -> None:
    """Reports that change members of this domain were recorded on their trays: fold them."""
    transaction.on_commit(
        lambda: signals.member_reports_pending.send(sender=None, domain_id=domain_id)
    )


def announce_peers_changed(domain_id: int) -> None:
    """This domain's members changed: its trays must learn the new peer list (batched)."""
    after_commit(signals.peers_changed, domain_id=domain_id)


def announce_placement_wanted(domain_id: int) -> None:
    """This domain was admitted and waits to be placed."""
    after_commit(signals.placement_wanted, domain_id=domain_id)


def announce_capacity_freed() -> None:
    """Trays or channels came free (or back into the pool): queued domains may fit now."""
    after_commit(signals.capacity_freed)
