"""A tray's facts as its agent states them (the contract's `NodeFacts`: NVML, /proc/devices,
the host, versions), and how they land on the inventory: the tray's row, its clique, its
GPUs, its conditions."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db import transaction

from agentwire.messages import ConditionType, NodeFacts
from domains.audit.events import Actor, record_event
from domains.errors import Conflict, InvalidInput
from domains.inventory.identity import gpus_sync, identity_hold, management_ip_refusal
from domains.inventory.models import Clique, Node, NodeCondition, NodeSource
from domains.inventory.services import node_conditions_set
from domains.signals import (
    announce_capacity_freed,
    announce_nodes,
)

# Conditions under which the probe's "no clique" means "could not tell", not "none".
UNSETTLED = (
    ConditionType.NVML_UNAVAILABLE,
    ConditionType.FABRIC_NOT_READY,
    ConditionType.FABRIC_FAILED,
    ConditionType.FABRIC_INCONSISTENT,
)
# Facts whose change the tray's event log records (the rest is bookkeeping).
_TRACKED = ("management_ip", "clique", "gpu_count", "gpu_product", "driver_version")


def agent_facts_update(*, node: Node, facts: NodeFacts) -> list[str]:
    """The tray's agent re-registers its facts and conditions under its node token.

    Sent after every agent start and whenever they change (a fabric registration completes,
    NVML comes back, the host's IMEX service is found). Returns what changed; an unchanged
    update writes nothing. The node token acts only for its own tray, so the hostname
    cannot change here, and the tray's identity (IP, clique, GPU set) only through an
    operator: a change is held (domains/inventory/identity.py), the rest applied.
    """
    if facts["hostname"] != node.hostname:
        raise Conflict(
            f"These facts are for {facts['hostname']}, not for {node.hostname}; a tray is renamed "
            "by joining again.",
            field="hostname",
        )
    check_ip(facts["ip"])
    actor = Actor.for_agent(node)
    with transaction.atomic():
        locked = (
            Node.objects.select_for_update(of=("self",)).select_related("clique").get(pk=node.pk)
        )
        if facts["ip"] and (
            Node.objects.filter(management_ip=facts["ip"]).exclude(pk=locked.pk).exists()
        ):
            raise Conflict(f"IP {facts['ip']} belongs to another tray.", field="ip")
        before = {name: _plain(getattr(locked, name)) for name in _TRACKED}
        blocked_before = _blocked(locked)
        held = identity_hold(node=locked, actor=actor, reported=reported_identity(locked, facts))
        apply_facts(locked, facts, keep=held)
        after = {name: _plain(getattr(locked, name)) for name in _TRACKED}
        changes = {
            k: {"from": before[k], "to": after[k]} for k in _TRACKED if before[k] != after[k]
        }
        locked.save()
        if "gpus" not in held:
            gpus_sync(locked, facts["gpus"])
        if changes:
            record_event(
                actor=actor,
                verb="agent.facts_changed",
                obj=locked,
                message=", ".join(f"{k}: {v['to'] or '—'}" for k, v in changes.items())[:500],
                details=changes,
            )
        changed = list(changes) + sorted(held)
        changed += node_conditions_set(actor=actor, node=locked, conditions=facts["conditions"])
        if blocked_before and not _blocked(locked):
            announce_capacity_freed()  # a tray just became placeable
    if changes or held:
        announce_nodes([locked.pk])
    return changed


def check_ip(ip: str) -> None:
    """A management IP no tray can have is refused, naming `ip` (identity.py)."""
    refusal = management_ip_refusal(ip) if ip else ""
    if refusal:
        raise InvalidInput(f"{refusal}.", field="ip")


def reported_identity(node: Node, facts: NodeFacts) -> dict[str, Any]:
    """The identity the facts state ({field: value}), as `identity_hold` compares it: facts
    left out state nothing, and the clique of a tray labelled by Kubernetes, or probed while
    NVML could not tell, is never the agent's to state (`apply_facts`)."""
    reported: dict[str, Any] = {}
    if facts["ip"]:
        reported["ip"] = facts["ip"]
    if not _labelled(node) and not _unsure(facts):
        clique = (facts["cluster_uuid"], facts["clique_id"])
        reported["clique"] = (
            f"{clique[0]}.{clique[1]}" if clique[0] and clique[1] is not None else ""
        )
    if facts["gpus"]:
        reported["gpus"] = [dict(g) for g in facts["gpus"]]
    return reported


def _blocked(node: Node) -> bool:
    return NodeCondition.objects.filter(node=node, blocking=True).exists()


def _plain(value: object) -> object:
    return str(value) if isinstance(value, Clique) else value


def apply_facts(node: Node, facts: NodeFacts, *, keep: Collection[str] = ()) -> None:
    """Copy the facts onto the tray's row (not saved), less the identity fields in `keep`
    (held for an operator: domains/inventory/identity.py)."""
    if facts["ip"] and "ip" not in keep:
        node.management_ip = facts["ip"]
    # On Kubernetes, GPU Feature Discovery's `nvidia.com/gpu.clique` label says which clique
    # the tray is in (domains/kube/services.py keeps it): the agent's probe never overrides
    # it. Elsewhere a probe that could not tell (NVML not loadable, a registration still in
    # progress) does not take the tray out of its clique either: its condition holds the
    # tray back, and the clique comes back with the probe that settles.
    if not _labelled(node) and not _unsure(facts) and "clique" not in keep:
        node.clique = _clique(node, facts)
    if facts["gpus"] and "gpus" not in keep:
        node.gpu_count = len(facts["gpus"])
        node.gpu_product = facts["gpus"][0]["product"] or node.gpu_product
    node.driver_version = facts["driver_version"] or node.driver_version
    node.imex_version = (
        facts.get("imex_version", "") or facts["driver_version"] or node.imex_version
    )
    node.channel_major = facts["channel_major"]
    node.channel_count = facts["channel_count"]
    node.agent_version = facts["agent_version"]


def _labelled(node: Node) -> bool:
    return node.source == NodeSource.KUBERNETES and node.clique_id is not None


def _unsure(facts: NodeFacts) -> bool:
    return any(c["type"] in UNSETTLED for c in facts["conditions"]) and not facts["cluster_uuid"]


def _clique(node: Node, facts: NodeFacts) -> Clique | None:
    """None: no (completed) multi-node NVLink, so never placed into a domain."""
    if not facts["cluster_uuid"] or facts["clique_id"] is None:
        return None
    clique, _ = Clique.objects.get_or_create(
        cluster_uuid=facts["cluster_uuid"],
        clique_id=facts["clique_id"],
        defaults={"rack": node.rack},
    )
    return clique
