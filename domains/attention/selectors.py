"""One list of what needs an operator now, each row with why, since when and the actions
that deal with it.

Trays: **down** (marked down; since its open incident), **silent agent** (ready, but its
agent silent past `PORTAL_HEARTBEAT_STALE_S`; since its last heartbeat), **daemon
restarting** (its IMEX daemon keeps exiting; since its member last changed state),
**GPU** (an XID, NVLink errors rising or heat: `domains.inventory.gpuhealth`), **draining
too long** (draining past `PORTAL_DRAIN_TOO_LONG_S`; since it was drained) and **waiting
to be accepted** (a tray the inventory did not know joined). Domains: **degraded** (a
Ready domain lost a tray; since then) and **approval waiting** (since it was requested).

A tray's state is read through one function, `tray_state`, so that what this list says of
a tray is what every other page says once they read the same truth. A constant number of
queries however large the fleet: the rows are read with their "since" in SQL, and only
the trays that need attention come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from domains.audit.models import Event
from domains.computedomains.models import (
    ApprovalState,
    ComputeDomain,
    DomainMember,
    Incident,
    Phase,
)
from domains.computedomains.trays import TRAY_ACTIONS
from domains.inventory.gpuhealth import ALERT_FIELDS, alert_window, gpu_alerts, hot_c
from domains.inventory.models import Gpu, Node, NodeState

DOWN, SILENT, DAEMON, GPU = "down", "silent", "daemon", "gpu"
DRAINING, PENDING, DEGRADED, APPROVAL = "draining", "pending", "degraded", "approval"
# Every reason, most urgent first, with its words (the list's default order and filter).
KINDS = {
    DOWN: "Tray down",
    SILENT: "Agent silent",
    DAEMON: "IMEX daemon restarting",
    GPU: "GPU errors",
    DEGRADED: "Domain degraded",
    DRAINING: "Draining too long",
    PENDING: "Tray waiting to be accepted",
    APPROVAL: "Approval waiting",
}
# What to do about each, in order: tray actions (`TRAY_ACTIONS`) that apply in the tray's
# state, and "accept", "approve" and "open" (the domain's page).
ACTIONS = {
    DOWN: ("mark_up",),
    SILENT: ("cordon", "mark_down"),
    DAEMON: ("drain", "mark_down"),
    GPU: ("cordon", "drain"),
    DRAINING: ("mark_down",),
    PENDING: ("accept",),
    DEGRADED: ("open",),
    APPROVAL: ("approve",),
}
DAEMON_EXITED = "nvidia-imex exited"  # how the agent's report begins when its daemon exits


@dataclass(frozen=True)
class Item:
    """One thing needing attention."""

    kind: str  # a KINDS key
    subject: str  # the tray's hostname, or the domain's "<namespace>/<name>"
    why: str
    since: datetime | None
    rack: str = ""
    hostname: str = ""  # a tray's, or "" for a domain
    namespace: str = ""  # a domain's
    domain_uid: str = ""
    actions: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return KINDS[self.kind]


@dataclass(frozen=True)
class TrayState:
    """What a tray is now, as this list reads it (`tray_state`)."""

    state: str  # down | pending | draining | cordoned | silent | daemon | ready | unknown
    since: datetime | None


def tray_state(row: dict[str, Any], *, now: datetime) -> TrayState:
    """The one reading of a tray's state this list uses, from its row (`_TRAY_FIELDS`)."""
    state = row["state"]
    if state == NodeState.DOWN:
        return TrayState("down", row["incident_since"])
    if state == NodeState.PENDING:
        return TrayState(state, row["created_at"])  # when it joined
    if state in (NodeState.DRAINING, NodeState.CORDONED, NodeState.UNKNOWN):
        return TrayState(state, row["drained_at"] if state == NodeState.DRAINING else None)
    beat = row["last_heartbeat"]
    if beat is None or beat < now - settings.PORTAL["HEARTBEAT_STALE_AFTER"]:
        return TrayState("silent", beat)
    report = row["agent_report"] or {}
    if str(report.get("error", "")).startswith(DAEMON_EXITED):
        received = report.get("received_at")
        since = row["member_since"] or (datetime.fromisoformat(received) if received else None)
        return TrayState("daemon", since)
    return TrayState("ready", None)


def needs_attention(*, now: datetime | None = None) -> list[Item]:
    """Everything needing an operator now, most urgent kind first, oldest first within it."""
    now = now or timezone.now()
    items = [*_trays(now), *_gpus(now), *_domains()]
    order = list(KINDS)
    return sorted(items, key=lambda i: (order.index(i.kind), i.since or now, i.subject))


_TRAY_FIELDS = ("pk", "hostname", "rack__name", "state", "state_reason", "last_heartbeat",
                "agent_report", "created_at", "incident_since", "drained_at",
                "member_since")  # fmt: skip


def _trays(now: datetime) -> list[Item]:
    stale = now - settings.PORTAL["HEARTBEAT_STALE_AFTER"]
    flagged = (
        Q(state__in=[NodeState.DOWN, NodeState.DRAINING, NodeState.PENDING])
        | Q(state=NodeState.READY, last_heartbeat__lt=stale)
        | Q(state=NodeState.READY, last_heartbeat__isnull=True)
        | Q(agent_report__error__startswith=DAEMON_EXITED)
    )
    rows = (
        Node.objects.filter(flagged, gone=False)
        .annotate(
            incident_since=Subquery(
                Incident.objects.filter(node=OuterRef("pk"), ended_at__isnull=True).values(
                    "started_at"
                )[:1]
            ),
            drained_at=_last_event(node=OuterRef("pk"), verb="node.draining"),
            member_since=Subquery(
                DomainMember.objects.filter(node=OuterRef("pk"), active=True).values(
                    "state_changed_at"
                )[:1]
            ),
        )
        .values(*_TRAY_FIELDS)
    )
    items = []
    for row in rows:
        item = _tray_item(row, tray_state(row, now=now), now)
        if item is not None:
            items.append(item)
    return items


def _last_event(**match: Any) -> Subquery:
    return Subquery(Event.objects.filter(**match).order_by("-created_at").values("created_at")[:1])


def _tray_item(row: dict[str, Any], found: TrayState, now: datetime) -> Item | None:
    reason = row["state_reason"]
    report = row["agent_report"] or {}
    too_long = timedelta(seconds=settings.PORTAL["DRAIN_TOO_LONG_S"])
    kind, why = {
        "down": (DOWN, reason or "marked down"),
        "silent": (SILENT, "its agent has not reported" + (" yet" if not found.since else "")),
        "daemon": (DAEMON, str(report.get("error", "")).split("\n", 1)[0]),
        "pending": (PENDING, "joined with the fleet's token; not in any rack slot yet"),
        "draining": (DRAINING, reason or "drained for service"),
    }.get(found.state, ("", ""))
    if not kind or (kind == DRAINING and (found.since is None or now - found.since < too_long)):
        return None
    return Item(
        kind=kind,
        subject=row["hostname"],
        why=why,
        since=found.since,
        rack=row["rack__name"] or "",
        hostname=row["hostname"],
        actions=_tray_actions(kind, row["state"]),
    )


def _tray_actions(kind: str, state: str) -> tuple[str, ...]:
    return tuple(
        key
        for key in ACTIONS[kind]
        if key not in TRAY_ACTIONS or state in TRAY_ACTIONS[key].applies_to
    )


def _gpus(now: datetime) -> list[Item]:
    """One item per tray whose GPUs have alerts, naming each GPU and what it has."""
    cut = now - alert_window()
    rows = (
        Gpu.objects.filter(
            Q(xid_at__gte=cut) | Q(nvlink_at__gte=cut) | Q(temperature_c__gte=hot_c()),
            node__gone=False,
        )
        .order_by("node__hostname", "index")
        .values_list("node__hostname", "node__rack__name", "node__state", "index", *ALERT_FIELDS)
    )
    per_tray: dict[str, tuple[str, str, list[str], list[datetime]]] = {}
    for hostname, rack, state, index, *alerting in rows:
        alerts = gpu_alerts(*alerting, now=now)
        if not alerts:
            continue
        _, _, words, since = per_tray.setdefault(hostname, (rack or "", state, [], []))
        words.append(f"GPU{index} " + ", ".join(a.words for a in alerts))
        since.extend(a.since for a in alerts)
    return [
        Item(GPU, host, "; ".join(words), min(since), rack, host, "", "", _tray_actions(GPU, state))
        for host, (rack, state, words, since) in per_tray.items()
    ]


def _domains() -> list[Item]:
    rows = (
        ComputeDomain.objects.filter(
            Q(phase=Phase.DEGRADED)
            | Q(phase=Phase.PENDING, approval_state=ApprovalState.PENDING)
        )
        .annotate(degraded_at=_last_event(domain=OuterRef("pk"), verb="domain.degraded"))
        .values_list("phase", "name", "namespace__name", "uid", "message", "created_at",
                     "degraded_at", "num_nodes")
    )  # fmt: skip
    items = []
    for phase, name, ns, uid, message, created, degraded_at, trays in rows:
        degraded = phase == Phase.DEGRADED
        why = (message or "lost a tray") if degraded else f"asks for {trays} trays"
        items.append(
            Item(
                kind=DEGRADED if degraded else APPROVAL,
                subject=f"{ns}/{name}",
                why=why,
                since=degraded_at if degraded else created,
                namespace=ns,
                domain_uid=str(uid),
                actions=ACTIONS[DEGRADED if degraded else APPROVAL],
            )
        )
    return items
