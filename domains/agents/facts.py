"""A tray's facts as its agent states them (the contract's `NodeFacts`: NVML, /proc/devices,
the host, versions), and how they land on the inventory: the tray's row, its clique, its
GPUs, its conditions."""

from __future__ import annotations

from django.db import transaction

from agentwire.messages import ConditionType, GpuFacts, NodeFacts
from domains.audit.events import CONTROLLER, Actor, record_event
from domains.errors import Conflict
from domains.inventory.models import Clique, Gpu, Node, NodeCondition, NodeSource, NodeState
from domains.inventory.services import (
    REASON_MAX,
    node_conditions_set,
    node_cordon,
)
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
    cannot change here.
    """
    if facts["hostname"] != node.hostname:
        raise Conflict(
            f"These facts are for {facts['hostname']}, not for {node.hostname}; a tray is renamed "
            "by joining again.",
            field="hostname",
        )
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
        apply_facts(locked, facts)
        after = {name: _plain(getattr(locked, name)) for name in _TRACKED}
        changes = {
            k: {"from": before[k], "to": after[k]} for k in _TRACKED if before[k] != after[k]
        }
        locked.save()
        sync_gpus(locked, facts["gpus"])
        if changes:
            record_event(
                actor=actor,
                verb="agent.facts_changed",
                obj=locked,
                message=", ".join(f"{k}: {v['to'] or '—'}" for k, v in changes.items())[:500],
                details=changes,
            )
        changed = list(changes)
        if _moved_clique(locked, changes):
            node_cordon(
                actor=CONTROLLER,
                node=locked,
                reason=(
                    f"its agent reported a move from clique {changes['clique']['from']} to "
                    f"{changes['clique']['to'] or 'none'}: an operator checks the tray, then "
                    "uncordons it"
                )[:REASON_MAX],
            )
        changed += node_conditions_set(actor=actor, node=locked, conditions=facts["conditions"])
        if blocked_before and not _blocked(locked):
            announce_capacity_freed()  # a tray just became placeable
    if changes:
        announce_nodes([locked.pk])
    return changed


def _moved_clique(node: Node, changes: dict[str, dict[str, object]]) -> bool:
    """A tray that was in a clique reports another (or none): a node token alone must not
    move a tray between NVLink partitions, as a join token alone cannot (`identity_changes`),
    so it stays out of placement until an operator has looked."""
    moved = "clique" in changes and changes["clique"]["from"] is not None
    return moved and node.state in (NodeState.READY, NodeState.UNKNOWN)


def _blocked(node: Node) -> bool:
    return NodeCondition.objects.filter(node=node, blocking=True).exists()


def _plain(value: object) -> object:
    return str(value) if isinstance(value, Clique) else value


def apply_facts(node: Node, facts: NodeFacts) -> None:
    if facts["ip"]:
        node.management_ip = facts["ip"]
    # On Kubernetes, GPU Feature Discovery's `nvidia.com/gpu.clique` label says which clique
    # the tray is in (domains/kube/services.py keeps it): the agent's probe never overrides
    # it. Elsewhere a probe that could not tell (NVML not loadable, a registration still in
    # progress) does not take the tray out of its clique either: its condition holds the
    # tray back, and the clique comes back with the probe that settles.
    labelled = node.source == NodeSource.KUBERNETES and node.clique_id is not None
    unsure = any(c["type"] in UNSETTLED for c in facts["conditions"]) and not facts["cluster_uuid"]
    if not labelled and not unsure:
        node.clique = _clique(node, facts)
    if facts["gpus"]:
        node.gpu_count = len(facts["gpus"])
        node.gpu_product = facts["gpus"][0]["product"] or node.gpu_product
    node.driver_version = facts["driver_version"] or node.driver_version
    node.imex_version = (
        facts.get("imex_version", "") or facts["driver_version"] or node.imex_version
    )
    node.channel_major = facts["channel_major"]
    node.channel_count = facts["channel_count"]
    node.agent_version = facts["agent_version"]


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


def sync_gpus(node: Node, gpus: list[GpuFacts]) -> None:
    if not gpus:
        return
    current = {g.index: g for g in node.gpus.all()}
    Gpu.objects.filter(node=node).exclude(index__in=[g["index"] for g in gpus]).delete()
    for fact in gpus:
        gpu = current.get(fact["index"])
        vbios = fact.get("vbios_version", "")  # an older agent does not send it
        if gpu and (gpu.uuid, gpu.product, gpu.fabric_state, gpu.vbios_version) == (
            fact["uuid"],
            fact["product"] or gpu.product,
            fact["fabric_state"],
            vbios or gpu.vbios_version,
        ):
            continue
        Gpu.objects.update_or_create(
            node=node,
            index=fact["index"],
            defaults={
                "uuid": fact["uuid"],
                "product": fact["product"],
                "fabric_state": fact["fabric_state"],
                **({"vbios_version": vbios} if vbios else {}),
            },
        )
