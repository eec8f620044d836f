"""Operator actions on trays (cordon, uncordon, drain, mark down and up) and their conditions.

A cordoned or draining tray takes no new domain but keeps serving the one it has (its
workload is not disturbed); draining says "and do not come back until I say so" on the
rack view. Marking a tray down is the operator's word that the tray is dead: a release
waiting for that tray's agent to confirm a clean node may then finish, and a running
domain on it turns Degraded (the lifecycle does that, hearing `signals.node_marked_down`
inside the same transaction).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from django.db import transaction
from django.utils import timezone

from agentwire.messages import Condition
from domains import signals
from domains.audit.events import Actor, record_event
from domains.errors import InvalidInput, InvalidTransition
from domains.inventory.identity import identity_apply
from domains.inventory.models import (
    Node,
    NodeCondition,
    NodeSource,
    NodeState,
    PartState,
    PowerShelf,
    Rack,
    SwitchTray,
)
from domains.signals import announce_capacity_freed, announce_desired_state, announce_nodes

REASON_MAX = 300

_Part = TypeVar("_Part", SwitchTray, PowerShelf)


def node_conditions_set(*, actor: Actor, node: Node, conditions: Iterable[Condition]) -> list[str]:
    """Make the tray's conditions exactly these; returns the types raised, changed or cleared.

    A condition keeps its `since` while it is reported again; each one raised or cleared is
    an Event on the tray, so the operator sees when a tray was held back and why.
    """
    wanted = {c["type"]: c for c in conditions}
    current = {c.type: c for c in NodeCondition.objects.filter(node=node)}
    changed: list[str] = []
    with transaction.atomic():
        for kind in sorted(set(current) - set(wanted)):
            current[kind].delete()
            record_event(
                actor=actor,
                verb="node.condition_cleared",
                obj=node,
                message=kind,
                details={"type": kind},
            )
            changed.append(kind)
        for kind, fact in sorted(wanted.items()):
            row = current.get(kind)
            if row is not None and (row.blocking, row.message) == (
                fact["blocking"],
                fact["message"],
            ):
                continue
            NodeCondition.objects.update_or_create(
                node=node,
                type=kind,
                defaults={"blocking": fact["blocking"], "message": fact["message"]},
                create_defaults={
                    "blocking": fact["blocking"],
                    "message": fact["message"],
                    "since": timezone.now(),
                },
            )
            if row is None:
                record_event(
                    actor=actor,
                    verb="node.condition_raised",
                    obj=node,
                    message=f"{kind}: {fact['message']}",
                    details={"type": kind, "blocking": fact["blocking"]},
                )
            changed.append(kind)
    if changed:
        announce_nodes([node.pk])
    return changed


def node_cordon(*, actor: Actor, node: Node, reason: str = "") -> Node:
    """No new domain lands here; the current one keeps running."""
    return _transition(
        actor,
        node,
        NodeState.CORDONED,
        allowed=(NodeState.READY, NodeState.UNKNOWN, NodeState.DRAINING, NodeState.CORDONED),
        verb="node.cordoned",
        reason=reason,
    )


def node_drain(*, actor: Actor, node: Node, reason: str = "") -> Node:
    """Like cordon, and marked for maintenance once its domain has gone."""
    return _transition(
        actor,
        node,
        NodeState.DRAINING,
        allowed=(NodeState.READY, NodeState.UNKNOWN, NodeState.CORDONED, NodeState.DRAINING),
        verb="node.draining",
        reason=reason,
    )


def node_uncordon(*, actor: Actor, node: Node, reason: str = "") -> Node:
    """Back into the pool; queued domains get another try."""
    node = _transition(
        actor,
        node,
        NodeState.READY,
        allowed=(NodeState.CORDONED, NodeState.DRAINING, NodeState.DOWN, NodeState.READY),
        verb="node.uncordoned",
        reason=reason,
    )
    announce_capacity_freed()
    return node


def node_mark_down(*, actor: Actor, node: Node, reason: str = "") -> Node:
    """The operator declares the tray dead.

    Its membership in a Releasing domain ends at once (nobody will ever report it clean),
    which may finish that release; in a running domain the member counts as failed, so
    the domain turns Degraded naming the tray.
    """
    with transaction.atomic():
        node = _transition(
            actor,
            node,
            NodeState.DOWN,
            allowed=tuple(NodeState.values),
            verb="node.marked_down",
            reason=reason,
        )
        message = "tray declared down by an operator" + (f": {reason}" if reason else "")
        signals.node_marked_down.send(sender=Node, node_id=node.pk, message=message)
        return node


def node_mark_up(*, actor: Actor, node: Node, reason: str = "") -> Node:
    """The operator says a tray marked down is back. It counts as unknown until its agent
    reports again (a heartbeat makes it ready), so nothing lands on a tray still silent. A
    tray that joined unknown and was never accepted into a rack waits for acceptance again:
    marking it down and up is no way around that."""
    never_accepted = node.source == NodeSource.AGENT and node.rack_id is None
    # The identity it had when marked down, compared: whatever it reported since (held,
    # domains/inventory/identity.py) waits for an operator to accept it.
    held = bool(Node.objects.filter(pk=node.pk).values_list("identity_hold", flat=True)[0])
    node = _transition(
        actor,
        node,
        NodeState.PENDING if never_accepted or held else NodeState.UNKNOWN,
        allowed=(NodeState.DOWN,),
        verb="node.marked_up",
        reason=reason,
    )
    announce_capacity_freed()
    return node


def _transition(
    actor: Actor, node: Node, new: str, *, allowed: tuple[str, ...], verb: str, reason: str
) -> Node:
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        old = locked.state
        if old not in allowed:
            raise InvalidTransition(f"{locked.hostname} is {old}; cannot become {new}")
        if old == new and locked.state_reason == reason[:REASON_MAX]:
            return locked  # idempotent: repeating an action changes nothing
        locked.state = new
        locked.state_reason = reason[:REASON_MAX]
        locked.save(update_fields=["state", "state_reason", "updated_at"])
        record_event(
            actor=actor,
            verb=verb,
            obj=locked,
            message=reason[:500],
            details={"from": old, "to": new},
        )
        announce_nodes([locked.pk])
        return locked


@transaction.atomic
def node_accept(
    *, actor: Actor, node: Node, rack: str = "", slot: int | None = None, reason: str = ""
) -> Node:
    """The operator accepts a tray waiting for acceptance: one that joined unknown, into a
    rack's compute slot (both needed), or one that reported a new identity, which is then
    applied (domains/inventory/identity.py) and the tray goes back to the state it had (a
    rack and slot, if given, move it too). It is placeable from then on. Refused, naming
    the field, when the rack does not exist, the slot is outside its compute slots or
    another tray holds it, or the tray's clique is another rack's."""
    locked = Node.objects.select_for_update(of=("self",)).select_related("rack").get(pk=node.pk)
    if locked.state != NodeState.PENDING:
        raise InvalidTransition(
            f"{locked.hostname} is {locked.get_state_display().lower()}, not waiting for acceptance"
        )
    hold = dict(locked.identity_hold or {})
    if not hold or rack or slot is not None:
        _accept_into_slot(locked, rack, slot)
    state = identity_apply(locked) if hold else NodeState.READY
    _check_clique_rack(locked)
    locked.state = state
    locked.save()
    where = f"rack {locked.rack.name}, slot {locked.slot}" if locked.rack else "no rack"
    record_event(
        actor=actor,
        verb="node.accepted",
        obj=locked,
        message=(reason or f"accepted into {where}")[:500],
        details={
            "rack": locked.rack.name if locked.rack else None,
            "slot": locked.slot,
            "identity": hold.get("changes", {}),
        },
    )
    announce_nodes([locked.pk])
    announce_desired_state([locked.pk])
    announce_capacity_freed()
    return locked


def _accept_into_slot(node: Node, rack: str, slot: int | None) -> None:
    if not rack:
        raise InvalidInput("name the rack the tray is in", field="rack")
    found = Rack.objects.filter(name=rack).first()
    if found is None:
        raise InvalidInput(f"no rack named {rack!r}", field="rack")
    if slot is None:
        raise InvalidInput("name the compute slot the tray is in", field="slot")
    if not 1 <= slot <= found.compute_slots:
        raise InvalidInput(
            f"rack {found.name} has compute slots 1 to {found.compute_slots}, not {slot}",
            field="slot",
        )
    holder = Node.objects.filter(rack=found, slot=slot).exclude(pk=node.pk).first()
    if holder is not None:
        raise InvalidInput(
            f"slot {slot} of rack {found.name} holds {holder.hostname} already", field="slot"
        )
    node.rack, node.slot = found, slot


def _check_clique_rack(node: Node) -> None:
    """A tray of one rack is never accepted into a clique of another's (placement refuses
    such a tray too: `domains.computedomains.fabric`)."""
    clique = node.clique
    if clique is None or None in (clique.rack_id, node.rack_id):
        return
    if clique.rack_id != node.rack_id:
        raise InvalidInput(
            f"clique {clique} is rack {clique.rack}'s, not rack {node.rack}'s: accept the "
            "tray into its clique's rack, or mark it down",
            field="rack",
        )


# --- rack parts without an agent: NVLink switch trays and power shelves -------------------


def switch_tray_set_state(
    *, actor: Actor, tray: SwitchTray, state: str, reason: str = ""
) -> SwitchTray:
    """An operator says a switch tray is down (failed, or out for service) or back."""
    return _part_set_state(actor, SwitchTray, tray.pk, state, reason, "switch_tray")


def power_shelf_set_state(
    *, actor: Actor, shelf: PowerShelf, state: str, reason: str = ""
) -> PowerShelf:
    """An operator says a power shelf is down (failed, or out for service) or back."""
    return _part_set_state(actor, PowerShelf, shelf.pk, state, reason, "power_shelf")


def _part_set_state(
    actor: Actor,
    model: type[_Part],
    pk: int,
    state: str,
    reason: str,
    noun: str,
) -> _Part:
    if state not in PartState.values:
        raise InvalidInput(f"must be one of {', '.join(PartState.values)}", field="state")
    with transaction.atomic():
        locked = model.objects.select_for_update().get(pk=pk)
        old = locked.state
        if old == state and locked.state_reason == reason[:REASON_MAX]:
            return locked  # idempotent
        locked.state, locked.state_reason = state, reason[:REASON_MAX]
        locked.save(update_fields=["state", "state_reason", "updated_at"])
        record_event(
            actor=actor,
            verb=f"{noun}.{'down' if state == PartState.DOWN else 'up'}",
            obj=locked,
            message=reason[:500],
            details={"from": old, "to": state, "rack": locked.rack.name},
        )
        # The rack's drawings and what its trays' loss would mean changed.
        announce_nodes(Node.objects.filter(rack_id=locked.rack_id).values_list("pk", flat=True))
        return locked
