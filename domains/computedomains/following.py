"""A domain that follows its workload (`numNodes: 0`): the cliques it keeps to, and which
trays a claim may make its new members.

Such a domain holds no trays up front; each tray joins when a pod's claim is prepared on it
(domains/computedomains/claims.py). Two rules keep the scheduler and that admission in
step, so that kube-scheduler never allocates a claim the admission would refuse (a refused
claim is never allocated again: its pod would hang):

- **Its cliques, fixed up front.** When the domain is requested, the portal keeps the set
  of cliques its placement constraint allows (any: every labelled clique; a rack: that
  rack's; a clique: that one). The domain's ResourceClaimTemplate selects only those
  cliques' trays (domains/kube/dra.py): a template's spec cannot change once made, so a
  clique labelled later is not the domain's. Its pods may land in several of them; each
  clique's members form an IMEX ensemble of their own (indexed per clique, with a channel
  from that clique's ledger), as with NVIDIA's driver.
- **Trays a new member may come from** (`join_refusal`): ready, not gone, in a clique with
  a management IP, no blocking condition, not held by any domain (a released domain's tray
  is held until its agent confirmed a clean tray) and not reserved for maintenance (a
  window scheduled on it and not over: such a domain's hold has no end the portal can
  foresee, its pods decide). The desired state says the same of each tray as `eligible`
  (domains/agents/desired.py, one SQL statement), which the agent publishes in the tray's
  ResourceSlice.
"""

from __future__ import annotations

import math
from datetime import datetime

from django.utils import timezone

from domains.computedomains.fabric import FOREIGN_CLIQUE, topology_snapshot
from domains.computedomains.models import DomainMember
from domains.inventory.models import MaintenanceWindow, Node, NodeCondition, NodeState
from domains.placement.algorithm import cliques_to_follow
from domains.placement.model import PlacementRequest


def cliques_to_keep(
    *, gpus_per_node: int, constraint: str, target: str, now: datetime | None = None
) -> list[int]:
    """The ids of the cliques a domain that follows its workload may take trays from, as
    its constraint allows them now; empty when it allows none (it cannot be requested
    then)."""
    now = now or timezone.now()
    request = PlacementRequest(
        num_nodes=0,
        gpus_per_node=gpus_per_node,
        constraint=constraint,
        target=target,
        at=now.timestamp(),
        until=math.inf,
    )
    return [c.clique_id for c in cliques_to_follow(request, topology_snapshot(now=now))]


def join_refusal(node: Node, *, now: datetime | None = None) -> str:
    """Why the tray cannot become a new member of a domain that follows its workload ("" when
    it can), in words that follow its hostname."""
    if node.state != NodeState.READY or node.gone:
        return f"is {'gone' if node.gone else node.get_state_display().lower()}, not ready"
    if node.clique_id is None or not node.management_ip:
        return "has no NVLink clique or management IP yet"
    if NodeCondition.objects.filter(node=node, blocking=True).exists():
        return "has a blocking condition (see its page)"
    if Node.objects.filter(pk=node.pk).filter(FOREIGN_CLIQUE).exists():
        return "is in a clique of another rack (an operator checks it)"
    if DomainMember.objects.filter(node=node, active=True).exists():
        return "serves another ComputeDomain (or is still being cleaned after one)"
    window = (
        MaintenanceWindow.objects.filter(
            nodes=node, cancelled_at__isnull=True, ends_at__gt=now or timezone.now()
        )
        .order_by("starts_at")
        .first()
    )
    if window is not None:
        return (
            f"is reserved for maintenance from {window.starts_at:%Y-%m-%d %H:%M} to "
            f"{window.ends_at:%Y-%m-%d %H:%M} UTC ({window.reason})"
        )
    return ""
