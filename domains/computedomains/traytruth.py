"""One truth of a tray, computed here and nowhere else: what it is doing and whether it can
serve, from its state (the operator's flag), its agent's last heartbeat, its daemon's last
report and whether a domain holds it.

Every reader takes its words from here: placement's snapshot (`TrayStatus`, one word per
tray), the Fleet summary (a partition: each tray counted once, and "of which held by a
domain" beside it), the tray page, the rack drawings, the API, the metrics and the
failover pass (`lost_q`). Two rules hold everywhere:

- An operator's mark-down wins over anything its agent reports, until mark-up: the tray is
  `down`, whatever it says (and its member stays failed: `members.py`).
- A silent agent is its own state (`stale`, "agent silent"), not a dead daemon: the agent
  stopped reporting, and what its daemon last said (often READY: the daemon outlives the
  agent) is all that is known. It is counted "not ready" whether or not a domain holds the
  tray: an operator must see it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from domains.computedomains.models import DomainMember
from domains.inventory.models import Node, NodeCondition, NodeState
from domains.placement.model import TrayStatus

# The words every page uses for a tray's status.
STATUS_WORDS: dict[str, str] = {
    TrayStatus.FREE: "free",
    TrayStatus.IN_USE: "in use",
    TrayStatus.CORDONED: "cordoned",
    TrayStatus.DRAINING: "draining",
    TrayStatus.DOWN: "down",
    TrayStatus.UNKNOWN: "not ready",
    TrayStatus.STALE: "agent silent",
    TrayStatus.NO_ADDRESS: "no management IP",
    TrayStatus.BLOCKED: "condition",
    TrayStatus.FOREIGN: "clique of another rack",
}
# The statuses of a tray nobody flagged that cannot serve (the Fleet's "not ready").
NOT_READY = (
    TrayStatus.UNKNOWN,
    TrayStatus.STALE,
    TrayStatus.BLOCKED,
    TrayStatus.NO_ADDRESS,
    TrayStatus.FOREIGN,
)


class Agent:
    """Whether the tray's agent is heard from."""

    REPORTING = "reporting"
    SILENT = "silent"  # it reported once, not within HEARTBEAT_STALE_AFTER
    NEVER = "never"  # no heartbeat ever


def stale_after() -> timedelta:
    return settings.PORTAL["HEARTBEAT_STALE_AFTER"]


def tray_status(
    *,
    state: str,
    gone: bool,
    fresh: bool,
    held: bool,
    blocked: bool,
    has_ip: bool,
    foreign: bool = False,
) -> str:
    """The one word for a tray (`TrayStatus`), by precedence: the operator's mark-down; a
    tray not known to serve (gone, never joined, pending acceptance); a silent agent; the
    operator's cordon or drain; held by a domain; what keeps a free tray out of placement.
    Only `free` is placeable."""
    if state == NodeState.DOWN:
        return TrayStatus.DOWN
    if gone or state in (NodeState.UNKNOWN, NodeState.PENDING):
        return TrayStatus.UNKNOWN
    if not fresh:  # no heartbeat at all, or none within HEARTBEAT_STALE_AFTER
        return TrayStatus.STALE
    if state == NodeState.DRAINING:
        return TrayStatus.DRAINING
    if state == NodeState.CORDONED:
        return TrayStatus.CORDONED
    if held:
        return TrayStatus.IN_USE
    if not has_ip:  # every member's nodes file lists each peer's IP: it could not serve
        return TrayStatus.NO_ADDRESS
    if foreign:  # its clique is another rack's: the inventory is wrong about one of them
        return TrayStatus.FOREIGN
    if blocked:
        return TrayStatus.BLOCKED
    return TrayStatus.FREE


@dataclass(frozen=True, slots=True)
class TrayTruth:
    """A tray as every reader tells it."""

    status: str  # TrayStatus: one word, a partition of the fleet
    held: bool  # a live domain holds it
    agent: str  # Agent.*
    daemon: str  # its IMEX daemon's state as last reported ("" none)
    heard: datetime | None  # its agent's last heartbeat

    @property
    def word(self) -> str:
        return STATUS_WORDS.get(self.status, self.status)

    @property
    def silent(self) -> bool:
        return self.agent == Agent.SILENT

    @property
    def agent_words(self) -> str:
        """'reporting', or 'not reporting since 12:03:41 UTC (IMEX daemon last READY)'."""
        if self.agent == Agent.REPORTING:
            return "reporting"
        if self.heard is None:
            return "never reported"
        said = f" (IMEX daemon last {self.daemon})" if self.daemon else ""
        return f"not reporting since {self.heard:%H:%M:%S} UTC" + said


def tray_truth(
    *,
    state: str,
    gone: bool,
    heard: datetime | None,
    daemon: str,
    held: bool,
    blocked: bool,
    has_ip: bool,
    foreign: bool = False,
    now: datetime | None = None,
) -> TrayTruth:
    now = now or timezone.now()
    fresh = heard is not None and heard >= now - stale_after()
    agent = Agent.REPORTING if fresh else (Agent.NEVER if heard is None else Agent.SILENT)
    status = tray_status(
        state=state,
        gone=gone,
        fresh=fresh,
        held=held,
        blocked=blocked,
        has_ip=has_ip,
        foreign=foreign,
    )
    return TrayTruth(status=status, held=held, agent=agent, daemon=daemon, heard=heard)


def node_truth(node: Node, *, now: datetime | None = None) -> TrayTruth:
    """One tray's truth (two queries: is it held, has it a blocking condition)."""
    return tray_truth(
        state=node.state,
        gone=node.gone,
        heard=node.last_heartbeat,
        daemon=node.daemon_state,
        held=DomainMember.objects.filter(node=node, active=True).exists(),
        blocked=NodeCondition.objects.filter(node=node, blocking=True).exists(),
        has_ip=bool(node.management_ip),
        foreign=in_foreign_clique(node),
        now=now,
    )


def in_foreign_clique(node: Node) -> bool:
    """Whether the tray's clique belongs to another rack than the tray (NVLink never spans
    racks: the inventory is wrong about one of them, and placement leaves the tray out)."""
    clique = node.clique if node.clique_id is not None else None
    if node.rack_id is None or clique is None or clique.rack_id is None:
        return False
    return bool(clique.rack_id != node.rack_id)


# --- a tray lost to its domain ------------------------------------------------------------------


def failover_grace() -> timedelta:
    """How long an agent may be silent before its tray counts as lost to its domain
    (PORTAL_FAILOVER_GRACE_S; a restarted or upgraded agent is back long before), and never
    less than the silence after which it counts as silent at all."""
    return max(settings.PORTAL["FAILOVER_GRACE"], stale_after())


def lost_q(prefix: str = "", *, now: datetime | None = None) -> Q:
    """Trays lost to whatever they serve: marked down, vanished from Kubernetes, or with an
    agent silent past the failover grace (`prefix`: the path to the tray, e.g. "node__")."""
    cutoff = (now or timezone.now()) - failover_grace()
    return (
        Q(**{f"{prefix}state": NodeState.DOWN})
        | Q(**{f"{prefix}gone": True})
        | Q(**{f"{prefix}last_heartbeat__lt": cutoff})
    )


def lost_words(node: Node) -> str:
    """Why the tray is lost, as its domain's tenant reads it."""
    if node.state == NodeState.DOWN:
        why = f": {node.state_reason}" if node.state_reason else ""
        return f"tray {node.hostname} is down{why}"
    if node.gone:
        return f"tray {node.hostname} is gone from Kubernetes"
    seen = node.last_heartbeat
    since = f" since {seen:%H:%M:%S} UTC" if seen else ""
    return f"the agent of tray {node.hostname} has not reported{since}"
