"""Writes for the agent protocol: joining, facts, status reports, refused access.

A report is the heartbeat of 2,000 trays every 10 s, so `agent_heartbeat` records it in
one UPDATE on the node that also reads the tray's membership, and leaves the member/domain
bookkeeping to the lifecycle (`domain_members_report`, the single owner of member and
phase changes), telling it what the agent's step means in the lifecycle's words
(`member_report`). A report that changes its member is folded on a worker, once per burst
for the whole domain (`reports_fold`); `agent_report`, the rarer path through Django,
folds its report at once.
"""

from __future__ import annotations

import dataclasses
import functools
import hmac
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agentwire.messages import ConditionType
from domains.agents.models import JoinToken
from domains.agents.report import AgentReport, PeerStatus, Step
from domains.agents.selectors import usable_join_token
from domains.audit.announce import (
    announce_capacity_freed,
    announce_member_reports,
    announce_nodes,
)
from domains.audit.events import CONTROLLER, Actor, record_event
from domains.computedomains.members import (
    REPORTED_FIELDS,
    MemberReport,
    domain_member_report,
    domain_members_report,
    report_changes_member,
)
from domains.computedomains.models import ComputeDomain, DomainMember, MemberState
from domains.errors import Conflict, PermissionDenied
from domains.inventory.models import Clique, Gpu, Node, NodeCondition, NodeSource, NodeState
from domains.inventory.services import (
    REASON_MAX,
    ConditionFacts,
    node_conditions_set,
    node_cordon,
)
from domains.security import generate_token, hash_token
from domains.sqlnames import column, table

log = logging.getLogger(__name__)

# Node states an agent's heartbeat brings back to `ready`; cordoned/draining trays and
# trays an operator marked down stay as they are.
_RECOVERABLE = (NodeState.UNKNOWN,)
PENDING_REASON = (
    "a tray the inventory did not know joined: an operator accepts it into a rack and slot "
    "before anything is placed on it"
)


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: str
    product: str = ""
    fabric_state: str = "COMPLETED"


@dataclass(frozen=True)
class NodeFacts:
    """What an agent says about its tray when it joins (NVML, /proc/devices, versions)."""

    hostname: str
    ip: str | None = None
    gpus: list[GpuFacts] = field(default_factory=list)
    cluster_uuid: str = ""  # "" when the tray has no multi-node NVLink
    clique_id: int | None = None
    driver_version: str = ""
    imex_version: str = ""
    channel_major: int | None = None
    channel_count: int = 2048
    agent_version: str = ""
    conditions: list[ConditionFacts] = field(default_factory=list)


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
    if bound_node:
        if bound_node != facts.hostname:
            raise PermissionDenied(
                f"An agent joins only as the node it runs on, not as {facts.hostname}.",
                field="hostname",
            )
    else:
        _check_join_token(join_token)
    node = (
        Node.objects.select_for_update(of=("self",))
        .filter(hostname=facts.hostname)
        .order_by("pk")
        .first()
    )
    if node is not None:
        _check_may_rejoin(node, facts, proven=bool(bound_node))
    if (
        facts.ip
        and Node.objects.filter(management_ip=facts.ip).exclude(hostname=facts.hostname).exists()
    ):
        raise Conflict(f"IP {facts.ip} belongs to another tray.", field="ip")
    created = node is None
    if node is None:
        node = Node(
            hostname=facts.hostname,
            source=NodeSource.AGENT,
            state=NodeState.PENDING,
            state_reason=PENDING_REASON,
        )
    raw = generate_token("dpn")
    _apply_facts(node, facts)
    node.agent_token_hash = hash_token(raw)
    node.last_heartbeat = timezone.now()
    node.rejoin_allowed_until = None  # an operator's allowance serves one join
    if node.state in _RECOVERABLE:
        node.state, node.state_reason = NodeState.READY, ""
    try:
        node.save()
    except IntegrityError as exc:
        raise Conflict(f"Tray {facts.hostname} cannot be registered: {exc}", field="hostname")
    _sync_gpus(node, facts.gpus)
    if created:
        record_event(
            actor=Actor.for_agent(node),
            verb="node.pending",
            obj=node,
            message=f"{facts.hostname} ({facts.ip or 'no IP'}) waits for an operator to accept it",
            details={"clique": str(node.clique or ""), "gpus": len(facts.gpus)},
        )
    record_event(
        actor=Actor.for_agent(node),
        verb="agent.joined" if created else "agent.rejoined",
        obj=node,
        message=f"agent {facts.agent_version or '?'} joined; clique {node.clique or 'none'}",
        details={
            "ip": facts.ip,
            "gpus": len(facts.gpus),
            "channel_major": facts.channel_major,
            "credential": "service account token" if bound_node else "join token",
        },
    )
    # A new tray held back by a condition (NVML not loadable, the host's own IMEX running)
    # must not be placeable for a moment before its first facts update says so.
    node_conditions_set(actor=Actor.for_agent(node), node=node, conditions=facts.conditions)
    announce_nodes([node.pk])
    return node, raw


# Conditions under which the probe's "no clique" means "could not tell", not "none".
_UNSETTLED = (
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
    if facts.hostname != node.hostname:
        raise Conflict(
            f"These facts are for {facts.hostname}, not for {node.hostname}; a tray is renamed "
            "by joining again.",
            field="hostname",
        )
    actor = Actor.for_agent(node)
    with transaction.atomic():
        locked = (
            Node.objects.select_for_update(of=("self",)).select_related("clique").get(pk=node.pk)
        )
        if facts.ip and (
            Node.objects.filter(management_ip=facts.ip).exclude(pk=locked.pk).exists()
        ):
            raise Conflict(f"IP {facts.ip} belongs to another tray.", field="ip")
        before = {name: _plain(getattr(locked, name)) for name in _TRACKED}
        blocked_before = _blocked(locked)
        _apply_facts(locked, facts)
        after = {name: _plain(getattr(locked, name)) for name in _TRACKED}
        changes = {
            k: {"from": before[k], "to": after[k]} for k in _TRACKED if before[k] != after[k]
        }
        locked.save()
        _sync_gpus(locked, facts.gpus)
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
        changed += node_conditions_set(actor=actor, node=locked, conditions=facts.conditions)
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
    taken from the join (`_apply_facts`), so it cannot change here either.
    """
    changed = []
    if facts.ip and node.management_ip and facts.ip != node.management_ip:
        changed.append("ip")
    labelled = node.source == NodeSource.KUBERNETES and node.clique_id is not None
    unsure = any(c.type in _UNSETTLED for c in facts.conditions) and not facts.cluster_uuid
    if not labelled and not unsure:
        claimed = (facts.cluster_uuid, facts.clique_id) if facts.cluster_uuid else None
        known = (node.clique.cluster_uuid, node.clique.clique_id) if node.clique else None
        if claimed != known:
            changed.append("clique")
    known_gpus = sorted(node.gpus.values_list("uuid", flat=True))
    if facts.gpus and known_gpus and sorted(g.uuid for g in facts.gpus) != known_gpus:
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


def _apply_facts(node: Node, facts: NodeFacts) -> None:
    if facts.ip:
        node.management_ip = facts.ip
    # On Kubernetes, GPU Feature Discovery's `nvidia.com/gpu.clique` label says which clique
    # the tray is in (domains/kube/services.py keeps it): the agent's probe never overrides
    # it. Elsewhere a probe that could not tell (NVML not loadable, a registration still in
    # progress) does not take the tray out of its clique either: its condition holds the
    # tray back, and the clique comes back with the probe that settles.
    labelled = node.source == NodeSource.KUBERNETES and node.clique_id is not None
    unsure = any(c.type in _UNSETTLED for c in facts.conditions) and not facts.cluster_uuid
    if not labelled and not unsure:
        node.clique = _clique(node, facts)
    if facts.gpus:
        node.gpu_count = len(facts.gpus)
        node.gpu_product = facts.gpus[0].product or node.gpu_product
    node.driver_version = facts.driver_version or node.driver_version
    node.imex_version = facts.imex_version or facts.driver_version or node.imex_version
    node.channel_major = facts.channel_major
    node.channel_count = facts.channel_count
    node.agent_version = facts.agent_version


def _clique(node: Node, facts: NodeFacts) -> Clique | None:
    """None: no (completed) multi-node NVLink, so never placed into a domain."""
    if not facts.cluster_uuid or facts.clique_id is None:
        return None
    clique, _ = Clique.objects.get_or_create(
        cluster_uuid=facts.cluster_uuid, clique_id=facts.clique_id, defaults={"rack": node.rack}
    )
    return clique


def _sync_gpus(node: Node, gpus: list[GpuFacts]) -> None:
    if not gpus:
        return
    current = {g.index: g for g in node.gpus.all()}
    Gpu.objects.filter(node=node).exclude(index__in=[g.index for g in gpus]).delete()
    for fact in gpus:
        gpu = current.get(fact.index)
        if gpu and (gpu.uuid, gpu.product, gpu.fabric_state) == (
            fact.uuid,
            fact.product or gpu.product,
            fact.fabric_state,
        ):
            continue
        Gpu.objects.update_or_create(
            node=node,
            index=fact.index,
            defaults={
                "uuid": fact.uuid,
                "product": fact.product,
                "fabric_state": fact.fabric_state,
            },
        )


def agent_heartbeat(*, node_id: int, token: str, report: AgentReport) -> bool:
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
        meta.get_field("agent_report").get_db_prep_save(_stored(report, now), connection),
        report.daemon_state,
        node_id,
        hash_token(token),
        *_RECOVERABLE,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_heartbeat_sql(), params)
        row = cursor.fetchone()
    if row is None:
        return False
    old_daemon, domain_id, uid, phase, generation, *fields = row
    if old_daemon != report.daemon_state:
        announce_nodes([node_id])  # the fabric view shows the daemon's state
    if domain_id is None:
        return True
    member = dict(zip(REPORTED_FIELDS, fields, strict=True))
    if isinstance(member["connections"], str):  # Django reads jsonb as text and decodes it
        member["connections"] = json.loads(member["connections"])
    folded = member_report(report)
    if report_changes_member(
        uid=str(uid), phase=phase, generation=generation, member=member, report=folded
    ):
        if settings.PORTAL["FOLD_REPORTS_ON_WORKER"]:
            announce_member_reports(domain_id)
        else:
            domain_members_report(domain_id=domain_id, reports={node_id: folded})
    return True


_HEARTBEAT_SQL = (
    "UPDATE {node} SET {beat} = %s, {report} = %s, {daemon} = %s"
    " FROM (SELECT {id}, {daemon} FROM {node} WHERE {id} = %s FOR UPDATE) AS old"
    " LEFT JOIN {member} AS m ON m.{member_node} = old.{id} AND m.{active}"
    " LEFT JOIN {domain} AS d ON d.{domain_id} = m.{member_domain}"
    " WHERE {node}.{id} = old.{id} AND {node}.{token} = %s AND NOT {node}.{gone}"
    " AND {node}.{state} NOT IN ({recoverable})"
    " RETURNING old.{daemon}, m.{member_domain}, d.{uid}, d.{phase}, d.{generation}, {reported}"
)


@functools.cache
def _heartbeat_sql() -> str:
    """_HEARTBEAT_SQL with the models' table and column names, quoted; values stay %s."""

    return _HEARTBEAT_SQL.format(
        node=table(Node),
        beat=column(Node, "last_heartbeat"),
        report=column(Node, "agent_report"),
        id=column(Node, "id"),
        token=column(Node, "agent_token_hash"),
        gone=column(Node, "gone"),
        daemon=column(Node, "daemon_state"),
        state=column(Node, "state"),
        recoverable=", ".join(["%s"] * len(_RECOVERABLE)),
        member=table(DomainMember),
        member_node=column(DomainMember, "node"),
        member_domain=column(DomainMember, "domain"),
        active=column(DomainMember, "active"),
        domain=table(ComputeDomain),
        domain_id=column(ComputeDomain, "id"),
        uid=column(ComputeDomain, "uid"),
        phase=column(ComputeDomain, "phase"),
        generation=column(ComputeDomain, "generation"),
        reported=", ".join(f"m.{column(DomainMember, name)}" for name in REPORTED_FIELDS),
    )


_REPORT_FIELDS = tuple(f.name for f in dataclasses.fields(AgentReport))
_PEER_FIELDS = tuple(f.name for f in dataclasses.fields(PeerStatus))


def _stored(report: AgentReport, received_at: datetime) -> dict[str, Any]:
    """`dataclasses.asdict(report)` and when it was received; built field by field, as
    asdict's deep copies cost more than the heartbeat's statement."""
    stored = {name: getattr(report, name) for name in _REPORT_FIELDS}
    stored["peers"] = [{name: getattr(p, name) for name in _PEER_FIELDS} for p in report.peers]
    stored["channels_present"] = list(report.channels_present)
    stored["received_at"] = received_at.isoformat()
    return stored


def agent_report(*, node: Node, report: AgentReport) -> None:
    """Record what the agent observed (the heartbeat) and fold it into its membership.

    The heartbeat is one UPDATE in autocommit: every tray sends one every few seconds, and
    a transaction around it would only add round trips. Whatever changes state (a tray
    coming back, a member's step) runs in its own transaction below.
    """
    now = timezone.now()
    updates: dict[str, Any] = {
        "last_heartbeat": now,
        "daemon_state": report.daemon_state,
        "agent_report": _stored(report, now),
    }
    changed = node.daemon_state != report.daemon_state
    if node.state in _RECOVERABLE:
        updates |= {"state": NodeState.READY, "state_reason": ""}
        changed = True
        with transaction.atomic():
            Node.objects.filter(pk=node.pk).update(**updates)
            record_event(actor=Actor.for_agent(node), verb="node.heartbeat_resumed", obj=node)
    else:
        Node.objects.filter(pk=node.pk).update(**updates)
    for key, value in updates.items():
        setattr(node, key, value)
    if changed:
        announce_nodes([node.pk])
    agent_member_report(node_id=node.pk, report=report)


# What each step of the agent means for its member while the domain runs.
_STEP_STATE = {
    Step.CONFIGURING: MemberState.CONFIGURING,
    Step.STARTING_DAEMON: MemberState.CONFIGURING,
    Step.WAITING_PEERS: MemberState.WAITING_PEERS,
    Step.READY: MemberState.READY,
    Step.FAILED: MemberState.FAILED,
    Step.RELEASING: MemberState.CONFIGURING,  # tearing down something else first
    Step.IDLE: MemberState.ASSIGNED,  # has not picked the domain up yet
}


def agent_member_report(*, node_id: int, report: AgentReport) -> None:
    """Fold the report into the membership that holds the tray, if any, now (no heartbeat)."""
    domain_member_report(node_id=node_id, report=member_report(report))


def member_report(report: AgentReport) -> MemberReport:
    """The agent's report in the lifecycle's words."""
    return MemberReport(
        domain_uid=report.domain_uid,
        state=_STEP_STATE.get(report.step, MemberState.CONFIGURING),
        clean=report.clean,
        generation_applied=report.generation_applied,
        step=report.step,
        message=report.error or report.message,
        daemon_state=report.daemon_state,
        connections={str(p.index): p.status for p in report.peers},
    )


def reports_fold(*, domain_id: int) -> int:
    """Fold the latest report of every active member of the domain (as recorded on its
    tray) into the members and the phase, in one transaction; returns how many changed.

    Run on a worker once per burst of changing reports (`announce_member_reports`); a
    report that lands while this runs announces itself again, so nothing is missed.
    """
    return domain_members_report(domain_id=domain_id, stored=_from_stored)


def _from_stored(stored: dict[str, Any], since: datetime) -> MemberReport | None:
    """`member_report` of the report `_stored` recorded on the tray, read straight from the
    stored dict (a fold reads every member's report, each with a peer per tray: rebuilding
    AgentReport and its PeerStatus list first was ~7% of a fold's CPU); None when there is
    none received `since`."""
    if not stored or "step" not in stored:
        return None
    try:
        if datetime.fromisoformat(stored["received_at"]) < since:
            return None
    except (KeyError, TypeError, ValueError):
        return None
    step = stored["step"]
    return MemberReport(
        domain_uid=stored["domain_uid"],
        state=_STEP_STATE.get(step, MemberState.CONFIGURING),
        clean=stored.get("clean", False),
        generation_applied=stored["generation_applied"],
        step=step,
        message=stored.get("error") or stored.get("message", ""),
        daemon_state=stored.get("daemon_state", ""),
        connections={str(p["index"]): p["status"] for p in stored.get("peers") or []},
    )


def agent_access_denied(*, node: Node, target_node_id: int | str, action: str) -> None:
    """A node token tried to act for another tray: refuse (the caller answers 403) and log."""
    log.warning("node %s tried to %s for node %s", node.hostname, action, target_node_id)
    with transaction.atomic():
        record_event(
            actor=Actor.for_agent(node),
            verb="agent.access_denied",
            obj=node,
            message=f"{node.hostname} tried to {action} for node {target_node_id}",
            details={"target_node_id": str(target_node_id), "action": action},
        )
