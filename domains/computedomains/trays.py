"""Operator actions on compute trays as the portal's pages, the API and the Django admin
offer them.

The inventory services (`node_cordon` …) are the writes; this module decides which of them
apply to a tray in its state, refuses what would change nothing ("uncordon" on a ready
tray) with a message saying so, and guards marking a tray down: a tray whose domain is
running is drained first, so nobody kills a tenant's workload with one click. Marking a
tray down while its domain is releasing is allowed — that is how a release stuck on a dead
tray finishes. The Kubernetes sync calls the inventory services directly: it acts on facts
(the Node vanished), not on an operator's choice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from domains.audit.events import Actor
from domains.computedomains.incidents import tell_tenants
from domains.computedomains.models import DomainMember
from domains.computedomains.selectors import RUNNING_PHASES
from domains.errors import DomainError, InvalidInput, InvalidTransition
from domains.inventory import services as inventory
from domains.inventory.models import Node, NodeState


@dataclass(frozen=True)
class TrayAction:
    """One thing an operator may do to a tray."""

    key: str
    title: str
    explanation: str
    applies_to: tuple[str, ...]  # the tray states it changes something in
    service: Callable[..., Node]
    danger: bool = True
    bulk: bool = False  # offered for many trays at once (with an impact preview)


TRAY_ACTIONS: dict[str, TrayAction] = {
    a.key: a
    for a in (
        TrayAction(
            "cordon",
            "Cordon",
            "No new domain lands here; the domain on it runs on.",
            (NodeState.READY, NodeState.UNKNOWN, NodeState.DRAINING),
            inventory.node_cordon,
            bulk=True,
        ),
        TrayAction(
            "drain",
            "Drain",
            "Cordon it for maintenance: the domain on it runs until released, nothing new "
            "lands, and it stays out of the pool until uncordoned.",
            (NodeState.READY, NodeState.UNKNOWN, NodeState.CORDONED),
            inventory.node_drain,
            bulk=True,
        ),
        TrayAction(
            "uncordon",
            "Uncordon",
            "Put it back into the pool: new domains may land on it.",
            (NodeState.CORDONED, NodeState.DRAINING),
            inventory.node_uncordon,
            danger=False,
            bulk=True,
        ),
        TrayAction(
            "mark_down",
            "Mark down",
            "Declare the tray dead: a release waiting for its agent finishes, a domain still "
            "on it turns Degraded, and its agent may register afresh.",
            # Pending too: a tray whose reported new identity an operator does not recognise.
            (
                NodeState.READY,
                NodeState.UNKNOWN,
                NodeState.CORDONED,
                NodeState.DRAINING,
                NodeState.PENDING,
            ),
            inventory.node_mark_down,
        ),
        TrayAction(
            "mark_up",
            "Mark up",
            "The tray is back: it counts as ready again once its agent reports.",
            (NodeState.DOWN,),
            inventory.node_mark_up,
            danger=False,
        ),
    )
}

STATE_WORDS: dict[str, str] = {
    NodeState.READY: "ready",
    NodeState.UNKNOWN: "not yet heard from",
    NodeState.CORDONED: "cordoned",
    NodeState.DRAINING: "draining",
    NodeState.DOWN: "down",
    NodeState.PENDING: "waiting for an operator to accept it",
}


def tray_action(key: str) -> TrayAction:
    try:
        return TRAY_ACTIONS[key]
    except KeyError:
        raise InvalidInput(
            f"no such tray action {key!r}; one of {', '.join(TRAY_ACTIONS)}", field="action"
        ) from None


def tray_actions_for(node: Node) -> list[TrayAction]:
    """The actions that would change something on this tray now, in display order."""
    return [a for a in TRAY_ACTIONS.values() if node.state in a.applies_to]


def tray_action_refusal(node: Node, action: TrayAction) -> str:
    """Why the action would be refused on this tray now ("" when it may go ahead)."""
    state = STATE_WORDS.get(node.state, node.state)
    if node.state not in action.applies_to:
        if action.key == "uncordon" and node.state == NodeState.DOWN:
            return f"{node.hostname} is down: mark it up instead."
        return f"{node.hostname} is {state} already: {action.title.lower()} changes nothing."
    if action.key == "mark_down" and node.state != NodeState.DRAINING:
        serving = _running_domain(node)
        if serving:
            return (
                f"{node.hostname} serves domain {serving}: drain it first (the domain keeps "
                "running), then mark it down — that turns the domain Degraded."
            )
    return ""


def tray_act(*, actor: Actor, node: Node, action: str, reason: str = "") -> Node:
    """Do one action to one tray, or raise InvalidTransition saying why not."""
    chosen = tray_action(action)
    current = Node.objects.get(pk=node.pk)  # the state now, not when the page was drawn
    refusal = tray_action_refusal(current, chosen)
    if refusal:
        raise InvalidTransition(refusal)
    done = chosen.service(actor=actor, node=current, reason=reason)
    if done.state != current.state:
        tell_tenants(actor=actor, node=done, action=chosen.key, reason=reason)
    return done


@dataclass(frozen=True)
class TrayOutcome:
    hostname: str
    done: bool
    message: str


def trays_act(
    *, actor: Actor, nodes: Iterable[Node], action: str, reason: str = ""
) -> list[TrayOutcome]:
    """One action on many trays (bulk cordon, drain, uncordon): each tray is done or
    refused on its own, so one tray already cordoned does not stop the rest."""
    chosen = tray_action(action)
    if not chosen.bulk:
        raise InvalidInput(f"{chosen.title} is done one tray at a time", field="action")
    outcomes = []
    for node in nodes:
        try:
            tray_act(actor=actor, node=node, action=action, reason=reason)
        except DomainError as exc:
            outcomes.append(TrayOutcome(node.hostname, False, exc.message))
        else:
            outcomes.append(TrayOutcome(node.hostname, True, f"{chosen.title.lower()} done"))
    return outcomes


def _running_domain(node: Node) -> str:
    member = (
        DomainMember.objects.filter(node=node, active=True, domain__phase__in=RUNNING_PHASES)
        .select_related("domain__namespace")
        .first()
    )
    if member is None:
        return ""
    return f"{member.domain} ({member.domain.phase})"
