"""What the business announces, and who listens.

Services send these through the `announce_*` functions below, which defer each send until
the surrounding transaction commits, so nobody hears of a change that rolled back (the one
exception, `node_marked_down`, says so below). Listeners: `portal.realtime` turns the
first four (and new in-app notifications) into websocket messages; `domains.kube`
publishes changed domains; `domains.computedomains` queues placement and lets go of trays
marked down; `domains.notifications` turns recorded events into notifications. Everything a
listener needs is in the keyword arguments; `sender` is the model class of the one object
a change is about, or None.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from django.db import transaction
from django.dispatch import Signal


class _Domain(Protocol):
    """What `announce_domain` reads of a domain (every app imports this module, so it names
    none of their models)."""

    @property
    def uid(self) -> Any: ...
    @property
    def namespace_id(self) -> Any: ...
    @property
    def phase(self) -> str: ...


# kwargs: domain_uid (str), namespace_id (int), phase (str)
domain_changed = Signal()
# kwargs: node_ids (list[int])
node_changed = Signal()
# kwargs: node_ids (list[int]) whose agents must re-fetch their desired state
desired_state_changed = Signal()
# kwargs: event_id (int), namespace_id (int | None), domain_uid (str | None), verb (str)
event_recorded = Signal()
# kwargs: domain_id (int) whose members' agents reported changes, recorded on the trays and
# waiting to be folded into the members and the phase
member_reports_pending = Signal()
# kwargs: domain_id (int) of a domain admitted and waiting to be placed
placement_wanted = Signal()
# kwargs: domain_id (int) whose membership in clique_id (int) changed (a domain that follows
# its workload): the agents of its members there must re-fetch their peer list, soon but not
# for every single join
peers_changed = Signal()
# no kwargs: trays or channels came free, so queued domains may fit now
capacity_freed = Signal()
# kwargs: notification_id (int), channel (str), user_id (int): a notification was written
# (in-app ones are delivered by that; e-mail and webhooks still have to be sent)
notification_created = Signal()

# kwargs: domain_id (int) of a placed domain that lost a tray and may get another in its place
failover_wanted = Signal()
# kwargs: node_ids (list[int]) of trays a domain let go of without their agent's word (lost
# and replaced): what the cluster still shows of them (their ResourceSlices, naming the
# domain) must be withdrawn, so that no new pod of the domain is scheduled there
trays_dropped = Signal()

# Sent INSIDE the transaction that marks a tray down (not after commit), so what listeners
# change is part of it. kwargs: node_id (int), message (str, why)
node_marked_down = Signal()

# --- announcing, after commit ---------------------------------------------------------------
# A listener that fails (the broker or the Channels layer away: Redis down) is logged and does
# not fail the caller: the change is committed, and whatever the listener would have started
# is picked up later by the periodic passes that read the database (docs/reliability.md).


def send_logged(signal: Signal, sender: Any = None, **kwargs: Any) -> None:
    """Send to every listener; one that raises is logged (by Django's `send_robust`, with its
    traceback, on the `django.dispatch` logger), never raised to the caller."""
    signal.send_robust(sender=sender, **kwargs)


def after_commit(signal: Signal, sender: Any = None, **kwargs: Any) -> None:
    """`send_logged` once the surrounding transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send_logged(signal, sender, **kwargs))


def announce_domain(domain: _Domain) -> None:
    """This domain's status changed."""
    sender, uid, ns_id, phase = type(domain), str(domain.uid), domain.namespace_id, domain.phase
    after_commit(domain_changed, sender, domain_uid=uid, namespace_id=ns_id, phase=phase)


def announce_nodes(node_ids: Iterable[int]) -> None:
    """These trays changed (state, membership)."""
    ids = sorted(set(node_ids))
    if ids:
        after_commit(node_changed, node_ids=ids)


def announce_desired_state(node_ids: Iterable[int]) -> None:
    """These trays' agents must fetch their desired state now."""
    ids = sorted(set(node_ids))
    if ids:
        after_commit(desired_state_changed, node_ids=ids)


def announce_member_reports(domain_id: int) -> None:
    """Reports that change members of this domain were recorded on their trays: fold them."""
    transaction.on_commit(lambda: member_reports_pending.send(sender=None, domain_id=domain_id))


def announce_peers_changed(domain_id: int, clique_id: int) -> None:
    """This domain's members in the clique changed: the trays of that clique's ensemble
    must learn the new peer list (batched); the other cliques' are not told."""
    after_commit(peers_changed, domain_id=domain_id, clique_id=clique_id)


def announce_placement_wanted(domain_id: int) -> None:
    """This domain was admitted and waits to be placed."""
    after_commit(placement_wanted, domain_id=domain_id)


def announce_capacity_freed() -> None:
    """Trays or channels came free (or back into the pool): queued domains may fit now."""
    after_commit(capacity_freed)


def announce_trays_dropped(node_ids: Iterable[int]) -> None:
    """These trays were let go of by their domain without their agents' word."""
    ids = sorted(set(node_ids))
    if ids:
        after_commit(trays_dropped, node_ids=ids)


def announce_failover_wanted(domain_id: int) -> None:
    """This placed domain lost a tray: replace it (the failover pass) once committed."""
    after_commit(failover_wanted, domain_id=domain_id)
