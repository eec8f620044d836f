"""The agent's status report as a heartbeat: recorded on the tray, in one statement on the
hot path (`agent_heartbeat`) or through the ORM (`agent_report`), then handed to the fold.

A report is the heartbeat of 2,000 trays every 10 s, so `agent_heartbeat` records it in
one UPDATE on the node that also reads the tray's membership, and leaves the member/domain
bookkeeping to the lifecycle (`domains.computedomains.members`).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agentwire.messages import StatusReport
from domains.agents.gpuhealth import gpu_health_record
from domains.audit.events import Actor, record_event
from domains.computedomains.members import (
    REPORTED_FIELDS,
    domain_member_report,
    domain_members_report,
    report_changes_member,
)
from domains.computedomains.models import ComputeDomain, DomainMember
from domains.inventory.models import Node, NodeState
from domains.security import hash_token
from domains.signals import (
    announce_member_reports,
    announce_nodes,
)
from domains.sqlnames import column, statement

# Node states an agent's heartbeat brings back to `ready`; cordoned/draining trays and
# trays an operator marked down stay as they are.
RECOVERABLE = (NodeState.UNKNOWN,)


def agent_heartbeat(*, node_id: int, token: str, report: StatusReport) -> bool:
    """Any report of a tray in service, the steady state of 2,000 trays every 10 s, in one
    statement.

    Records the report on node `node_id` if `token` is that node's token and the node is
    not in a state a heartbeat recovers, reading in the same statement the daemon state it
    replaces and the tray's membership, so that deciding whether the report changes its
    member costs no query. False when that is not the case (another node's token, a
    revoked one, a tray to recover): nothing was written,
    and the caller authenticates and goes through `agent_report`.

    Hand-written SQL (from the models' column names) because building the same UPDATE and
    membership check through the ORM cost three times the round trips' own time.
    """
    now = timezone.now()
    meta = Node._meta
    params = [
        meta.get_field("last_heartbeat").get_db_prep_save(now, connection),
        meta.get_field("agent_report").get_db_prep_save(stored_report(report, now), connection),
        report["daemon_state"],
        node_id,
        hash_token(token),
        *RECOVERABLE,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_heartbeat_sql(), params)
        row = cursor.fetchone()
    if row is None:
        return False
    if "gpu_health" in report:
        gpu_health_record(node_id=node_id, samples=report["gpu_health"], now=now)
    old_daemon, heard, tray_state, domain_id, uid, phase, generation, *fields = row
    if heard is None or heard < now - settings.PORTAL["HEARTBEAT_STALE_AFTER"]:
        _agent_back(node_id, heard)
    elif old_daemon != report["daemon_state"]:
        announce_nodes([node_id])  # the fabric view shows the daemon's state
    if domain_id is None:
        return True
    member = dict(zip(REPORTED_FIELDS, fields, strict=True))
    if isinstance(member["connections"], str):  # Django reads jsonb as text and decodes it
        member["connections"] = json.loads(member["connections"])
    if report_changes_member(
        uid=str(uid),
        phase=phase,
        generation=generation,
        member=member,
        report=report,
        tray_state=tray_state,
    ):
        if settings.PORTAL["FOLD_REPORTS_ON_WORKER"]:
            announce_member_reports(domain_id)
        else:
            domain_members_report(domain_id=domain_id, reports={node_id: report})
    return True


_HEARTBEAT_SQL = (
    "UPDATE {node} SET {node.last_heartbeat} = %s, {node.agent_report} = %s,"
    " {node.daemon_state} = %s"
    " FROM (SELECT {node.id}, {node.daemon_state}, {node.last_heartbeat} FROM {node}"
    " WHERE {node.id} = %s FOR UPDATE) AS old"
    " LEFT JOIN {member} AS m ON m.{member.node} = old.{node.id} AND m.{member.active}"
    " LEFT JOIN {domain} AS d ON d.{domain.id} = m.{member.domain}"
    " WHERE {node}.{node.id} = old.{node.id} AND {node}.{node.agent_token_hash} = %s"
    " AND NOT {node}.{node.gone} AND {node}.{node.state} NOT IN ({recoverable})"
    " RETURNING old.{node.daemon_state}, old.{node.last_heartbeat}, {node}.{node.state},"
    " m.{member.domain}, d.{domain.uid}, d.{domain.phase}, d.{domain.generation}, {reported}"
)


@functools.cache
def _heartbeat_sql() -> str:
    """_HEARTBEAT_SQL with the models' table and column names, quoted; values stay %s."""
    return statement(
        _HEARTBEAT_SQL,
        node=Node,
        member=DomainMember,
        domain=ComputeDomain,
        recoverable=", ".join(["%s"] * len(RECOVERABLE)),
        reported=", ".join(f"m.{column(DomainMember, name)}" for name in REPORTED_FIELDS),
    )


def _agent_back(node_id: int, heard: datetime | None) -> None:
    """The tray's agent reports again after a silence (or for the first time): operators'
    pages hear it, and its audit trail says so. (Its member, if it had gone silent, is
    brought back by the fold, which tells the domain's tenant.)"""
    if heard is not None:
        node = Node.objects.filter(pk=node_id).only("hostname").first()
        if node is not None:
            record_event(
                actor=Actor.for_agent(node),
                verb="node.agent_back",
                obj=node,
                message=f"{node.hostname}: its agent reports again (silent since "
                f"{heard:%H:%M:%S} UTC)",
            )
    announce_nodes([node_id])


def stored_report(report: StatusReport, received_at: datetime) -> dict[str, Any]:
    """The report as the tray keeps it (`Node.agent_report`): the agent's document, and when
    it was received. The GPUs' health, which only some reports carry, is kept on the GPUs
    (`gpu_health_record`)."""
    kept = {k: v for k, v in report.items() if k != "gpu_health"}
    return {**kept, "received_at": received_at.isoformat()}


def agent_report(*, node: Node, report: StatusReport) -> None:
    """Record what the agent observed (the heartbeat) and fold it into its membership.

    The heartbeat is one UPDATE in autocommit: every tray sends one every few seconds, and
    a transaction around it would only add round trips. Whatever changes state (a tray
    coming back, a member's step) runs in its own transaction below.
    """
    now = timezone.now()
    updates: dict[str, Any] = {
        "last_heartbeat": now,
        "daemon_state": report["daemon_state"],
        "agent_report": stored_report(report, now),
    }
    changed = node.daemon_state != report["daemon_state"]
    heard = node.last_heartbeat
    if heard is not None and heard < now - settings.PORTAL["HEARTBEAT_STALE_AFTER"]:
        _agent_back(node.pk, heard)
    if node.state in RECOVERABLE:
        updates |= {"state": NodeState.READY, "state_reason": ""}
        changed = True
        with transaction.atomic():
            Node.objects.filter(pk=node.pk).update(**updates)
            record_event(actor=Actor.for_agent(node), verb="node.heartbeat_resumed", obj=node)
    else:
        Node.objects.filter(pk=node.pk).update(**updates)
    for key, value in updates.items():
        setattr(node, key, value)
    if "gpu_health" in report:
        gpu_health_record(node_id=node.pk, samples=report["gpu_health"], now=now)
    if changed:
        announce_nodes([node.pk])
    domain_member_report(node_id=node.pk, report=report)
