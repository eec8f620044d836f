"""A tray's agent joins (or joins again): the credential, the rejoin policy that keeps a
shared join token from taking a known tray over, and refused access."""

from __future__ import annotations

import hmac
import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from agentwire.messages import NodeFacts
from domains.agents.facts import UNSETTLED, apply_facts, check_ip, reported_identity
from domains.agents.heartbeats import RECOVERABLE
from domains.agents.models import JoinToken
from domains.agents.selectors import usable_join_token
from domains.audit.events import Actor, record_event, record_refusal
from domains.computedomains.models import DomainMember
from domains.errors import Conflict, PermissionDenied
from domains.inventory.identity import gpus_sync, identity_hold
from domains.inventory.models import Node, NodeSource, NodeState
from domains.inventory.services import node_conditions_set
from domains.security import generate_token, hash_token
from domains.signals import announce_nodes

log = logging.getLogger(__name__)

PENDING_REASON = (
    "a tray the inventory did not know joined: an operator accepts it into a rack and slot "
    "before anything is placed on it"
)


# The demo's well-known join token (scripts/demo.sh): like the demo users' logins, it opens
# nothing while DEBUG is off, however it was configured (setting or JoinToken row).
DEMO_JOIN_TOKEN = "dpj_demo-join-token"  # noqa: S105 - public on purpose; inert without DEBUG


def _check_join_token(raw: str) -> None:
    """The settings token (compared in constant time) or a usable JoinToken row (counted)."""
    if not settings.DEBUG and hmac.compare_digest(raw.encode(), DEMO_JOIN_TOKEN.encode()):
        raise PermissionDenied(
            "The demo's join token works only with DEBUG on; give the agents a token of your "
            "own (PORTAL_AGENT_JOIN_TOKEN, or one made in Django admin).",
            field="join_token",
        )
    configured = settings.PORTAL["AGENT_JOIN_TOKEN"]
    if configured and hmac.compare_digest(configured.encode(), raw.encode()):
        return
    token = usable_join_token(raw) if raw else None
    if token is None:
        raise PermissionDenied("The join token is not valid.", field="join_token")
    used = JoinToken.objects.filter(pk=token.pk, revoked_at__isnull=True)
    if token.max_uses is not None:
        used = used.filter(uses__lt=token.max_uses)
    if used.update(uses=F("uses") + 1) != 1:
        raise PermissionDenied("The join token is used up.", field="join_token")


def _check_credential(facts: NodeFacts, *, join_token: str, bound_node: str) -> str:
    """The join's credential, checked; returns its name for the join's event."""
    if not bound_node:
        _check_join_token(join_token)
        return "join token"
    if bound_node != facts["hostname"]:
        raise PermissionDenied(
            f"An agent joins only as the node it runs on, not as {facts['hostname']}.",
            field="hostname",
        )
    return "service account token"


@transaction.atomic
def agent_join(*, facts: NodeFacts, join_token: str = "", bound_node: str = "") -> tuple[Node, str]:
    """Register (or re-register) a tray and issue its node token; returns (node, raw token).

    The raw token is returned once and stored only hashed. Joining again replaces the token,
    so a tray whose agent lost its token can come back. A join token is shared by the
    fleet, so whoever holds it must not take a known tray over (lock its agent out, move it
    between cliques, receive its domain's peers and channel): see `_check_may_rejoin`.

    `bound_node`, instead of a join token: the node a Kubernetes service-account token was
    verified to be bound to (domains/kube/tokenreview.py). That proves the caller is the
    agent running on that very tray, so it may re-register its own tray even while the tray
    looks alive or serves a domain (its state directory was lost, its node token replaced);
    it can never register another, and identity changes still need an operator.
    """
    credential = _check_credential(facts, join_token=join_token, bound_node=bound_node)
    check_ip(facts["ip"])
    node = (
        Node.objects.select_for_update(of=("self",))
        .filter(hostname=facts["hostname"])
        .order_by("pk")
        .first()
    )
    if node is not None:
        _check_may_rejoin(node, facts, proven=bool(bound_node))
    if (
        facts["ip"]
        and Node.objects.filter(management_ip=facts["ip"])
        .exclude(hostname=facts["hostname"])
        .exists()
    ):
        raise Conflict(f"IP {facts['ip']} belongs to another tray.", field="ip")
    created = node is None
    if node is None:
        node = Node(
            hostname=facts["hostname"],
            source=NodeSource.AGENT,
            state=NodeState.PENDING,
            state_reason=PENDING_REASON,
        )
    raw = generate_token("dpn")
    held = _hold_identity(node, facts) if not created else set()
    apply_facts(node, facts, keep=held)
    node.agent_token_hash = hash_token(raw)
    node.last_heartbeat = timezone.now()
    node.rejoin_allowed_until = None  # an operator's allowance serves one join
    if node.state in RECOVERABLE:
        node.state, node.state_reason = NodeState.READY, ""
    try:
        node.save()
    except IntegrityError as exc:
        raise Conflict(f"Tray {facts['hostname']} cannot be registered: {exc}", field="hostname")
    if "gpus" not in held:
        gpus_sync(node, facts["gpus"])
    _record_join(node, facts, created=created, credential=credential)
    # A new tray held back by a condition (NVML not loadable, the host's own IMEX running)
    # must not be placeable for a moment before its first facts update says so.
    node_conditions_set(actor=Actor.for_agent(node), node=node, conditions=facts["conditions"])
    announce_nodes([node.pk])
    return node, raw


def _hold_identity(node: Node, facts: NodeFacts) -> set[str]:
    """Identity changes a join reports on a known tray, held for an operator; none while an
    operator's allow-rejoin is open (that join may re-register anything) or before any
    agent has registered the tray (the seed's guesses give way to the first agent's facts).
    Only a join to a tray marked down gets here with changes (`_check_may_rejoin` refuses
    the rest): mark-up then compares, and the tray waits for acceptance."""
    allowed = node.rejoin_allowed_until is not None and node.rejoin_allowed_until > timezone.now()
    if allowed or not node.agent_token_hash:
        return set()
    return identity_hold(
        node=node, actor=Actor.for_agent(node), reported=reported_identity(node, facts)
    )


def _record_join(node: Node, facts: NodeFacts, *, created: bool, credential: str) -> None:
    """The join's events: a tray the inventory did not know waits for an operator."""
    if created:
        record_event(
            actor=Actor.for_agent(node),
            verb="node.pending",
            obj=node,
            message=f"{facts['hostname']} ({facts['ip'] or 'no IP'}) waits for an operator "
            "to accept it",
            details={"clique": str(node.clique or ""), "gpus": len(facts["gpus"])},
        )
    record_event(
        actor=Actor.for_agent(node),
        verb="agent.joined" if created else "agent.rejoined",
        obj=node,
        message=f"agent {facts['agent_version'] or '?'} joined; clique {node.clique or 'none'}",
        details={
            "ip": facts["ip"] or None,
            "gpus": len(facts["gpus"]),
            "channel_major": facts["channel_major"],
            "credential": credential,
        },
    )


def _check_may_rejoin(node: Node, facts: NodeFacts, *, proven: bool = False) -> None:
    """A join token may re-register a tray that an agent registered before only when nobody
    else speaks for it: no live agent (a heartbeat within HEARTBEAT_STALE_AFTER), no live
    domain, and the same identity facts (clique, GPUs, IP) as that agent registered.
    Anything else waits for an operator: `node_allow_rejoin` (one join within
    REJOIN_WINDOW) or marking the tray down. `proven`: the caller is proven to run on this
    tray (a node-bound service-account token), so it is the live agent: only the identity
    facts are checked.

    The refusals name only the tray, never the domain on it: the caller may be anyone.
    """
    if node.gone:
        raise Conflict(
            f"Tray {node.hostname} is marked gone (its Kubernetes Node vanished); it can join "
            "again once the Node is back.",
            field="hostname",
        )
    now = timezone.now()
    if node.state == NodeState.DOWN or (
        node.rejoin_allowed_until is not None and node.rejoin_allowed_until > now
    ):
        return  # an operator said so
    ask = (
        "An operator can allow a fresh registration (allow-rejoin), or drain the tray and mark "
        "it down."
    )
    if not proven:
        _check_nobody_speaks_for(node, ask)
    # The identity a tray's agent registered; before any agent has, the seed's guesses give
    # way to the first agent's facts.
    changed = identity_changes(node, facts) if node.agent_token_hash else []
    if changed:
        raise Conflict(
            f"Joining would change tray {node.hostname}'s {' and '.join(changed)}. {ask}",
            field=changed[0],
        )


def _check_nobody_speaks_for(node: Node, ask: str) -> None:
    """No live agent (a heartbeat within HEARTBEAT_STALE_AFTER) and no live domain."""
    stale = timezone.now() - settings.PORTAL["HEARTBEAT_STALE_AFTER"]
    if node.agent_token_hash and node.last_heartbeat and node.last_heartbeat > stale:
        raise Conflict(
            f"Tray {node.hostname} has a live agent, which keeps its node token. {ask}",
            field="hostname",
        )
    if node.agent_token_hash and DomainMember.objects.filter(node=node, active=True).exists():
        raise Conflict(
            f"Tray {node.hostname} serves a domain; its agent must keep its node token. {ask}",
            field="hostname",
        )


def identity_changes(node: Node, facts: NodeFacts) -> list[str]:
    """The identity facts (`ip`, `clique`, `gpus`) a join would change on a known tray.

    Facts the join leaves out, or that the tray has no record of yet, change nothing; the
    clique of a tray labelled by Kubernetes, or probed while NVML could not tell, is never
    taken from the join (`apply_facts`), so it cannot change here either.
    """
    changed = []
    if facts["ip"] and node.management_ip and facts["ip"] != node.management_ip:
        changed.append("ip")
    labelled = node.source == NodeSource.KUBERNETES and node.clique_id is not None
    unsure = any(c["type"] in UNSETTLED for c in facts["conditions"]) and not facts["cluster_uuid"]
    if not labelled and not unsure:
        claimed = (facts["cluster_uuid"], facts["clique_id"]) if facts["cluster_uuid"] else None
        known = (node.clique.cluster_uuid, node.clique.clique_id) if node.clique else None
        if claimed != known:
            changed.append("clique")
    known_gpus = sorted(node.gpus.values_list("uuid", flat=True))
    if facts["gpus"] and known_gpus and sorted(g["uuid"] for g in facts["gpus"]) != known_gpus:
        changed.append("gpus")
    return changed


# How long an operator's allow-rejoin stays open for the tray's next join.
REJOIN_WINDOW = timedelta(hours=1)


@transaction.atomic
def node_allow_rejoin(*, actor: Actor, node: Node, reason: str = "") -> Node:
    """The operator lets the tray's next agent join re-register it within REJOIN_WINDOW:
    a new node token (the old one stops working) and whatever identity facts it reports
    (a reinstalled tray, replaced GPUs, a new address, another clique)."""
    until = timezone.now() + REJOIN_WINDOW
    Node.objects.filter(pk=node.pk).update(rejoin_allowed_until=until)
    node.rejoin_allowed_until = until
    record_event(
        actor=actor,
        verb="node.rejoin_allowed",
        obj=node,
        message=reason[:500] or f"the next join until {until:%H:%M} UTC may re-register it",
        details={"until": until.isoformat()},
    )
    return node


def agent_access_denied(*, node: Node, target_node_id: int | str, action: str) -> None:
    """A node token tried to act for another tray: refuse (the caller answers 403), write
    it down and log it, once per burst (`record_refusal` counts the rest)."""
    with transaction.atomic():
        first = record_refusal(
            actor=Actor.for_agent(node),
            verb="agent.access_denied",
            obj=node,
            message=f"{node.hostname} tried to {action} for node {target_node_id}",
            details={"target_node_id": str(target_node_id), "action": action},
        )
    if first:
        log.warning("node %s tried to %s for node %s", node.hostname, action, target_node_id)
