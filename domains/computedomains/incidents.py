"""What tenants are told when a tray of their domain is taken out of service, and the
incidents operators follow a dead tray by.

A cordon or a drain leaves the domain running, but nothing new lands on the tray and a
drained tray goes to maintenance once the domain is released: each running domain on the
tray gets a line in its own timeline (so its page and the notifications say it), with the
operator's reason, which the action's form says tenants read (`tell_tenants`).

A tray marked down (by an operator, or by the Kubernetes sync when its Node vanished)
opens an `Incident`, in the transaction that marks it down and before its domains let go
of it, so the incident knows which domains and tenants it hit. It lasts until the tray is
marked up (or Kubernetes brings it back): one incident per down episode, at most one open
per tray (a database constraint). Operators write notes to the affected tenants on the
incident's page; each note is a line in every affected domain's timeline, which its page,
its events and the notifications show, and nowhere else (a tenant never reads another
namespace's domains or the incident page).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from domains.audit.events import SYSTEM, Actor, record_event
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain, DomainMember, Incident, Phase
from domains.computedomains.selectors import RUNNING_PHASES
from domains.errors import InvalidInput
from domains.inventory.models import Node, NodeState
from domains.tenancy.selectors import Viewer, is_operator

# Tray action → the verb recorded on each running domain that has a member on the tray.
TENANT_VERBS = {
    "cordon": "domain.tray_cordoned",
    "drain": "domain.tray_draining",
    "uncordon": "domain.tray_back",  # back in service (members.TRAY_BACK_VERB)
    "mark_up": "domain.tray_back",
}
NOTE_VERB = "incident.note"  # on the incident (the operators' record)
TENANT_NOTE_VERB = "domain.incident_note"  # on each affected domain (what its tenant reads)
# The verbs of a tray leaving the down state (an operator's mark-up; Kubernetes uncordons a
# tray whose Node came back).
BACK_UP_VERBS = ("node.marked_up", "node.uncordoned")
NOTE_MAX = 500
TIMELINE_MAX = 200
# The domains a dead tray hits: those it serves, and a release waiting for it.
HIT_PHASES = (*RUNNING_PHASES, Phase.RELEASING)

_WHAT_IT_MEANS = {
    "cordon": "your domain keeps running on it; nothing new lands there until it is uncordoned",
    "drain": "your domain keeps running on it until you release it; the tray then goes to "
    "maintenance, so plan to move the workload",
    "uncordon": "it is back in service and stays with your domain",
    "mark_up": "it is back in service; it serves your domain again once its agent reports",
}
_DONE_WORDS = {
    "cordon": "cordoned",
    "drain": "being drained",
    "uncordon": "uncordoned",
    "mark_up": "marked up",
}


def tell_tenants(*, actor: Actor, node: Node, action: str, reason: str = "") -> int:
    """Record the change on every running domain with a member on `node`; returns how many."""
    verb = TENANT_VERBS.get(action)
    if verb is None:
        return 0
    members = DomainMember.objects.filter(
        node=node, active=True, domain__phase__in=RUNNING_PHASES
    ).select_related("domain__namespace")
    done = 0
    for member in members:
        message = f"tray {node.hostname} is {_DONE_WORDS[action]}: {_WHAT_IT_MEANS[action]}"
        if reason:
            message += f". Operator's note: {reason}"
        record_event(
            actor=actor,
            verb=verb,
            obj=member.domain,
            node=node,
            message=message[:500],
            details={"nodes": [node.hostname], "action": action, "note": reason[:500]},
        )
        done += 1
    return done


# --- incidents: a tray down, from mark-down to mark-up ------------------------------------------


def incident_open(*, node_id: int) -> Incident | None:
    """The tray was just marked down (inside that transaction, before its domains let go of
    it): open its incident with the domains it hits, or keep the open one (marked down
    again with another reason: the same episode, the new reason)."""
    marked = (
        Event.objects.filter(node_id=node_id, verb="node.marked_down")
        .order_by("-created_at", "-id")
        .first()
    )
    if marked is None:  # not marked down through the inventory services: nothing to follow
        return None
    current = Incident.objects.select_for_update().filter(node_id=node_id, ended_at=None).first()
    if current is not None:
        current.reason = marked.message[:300]
        current.save(update_fields=["reason"])
        return current
    incident = Incident.objects.create(
        node_id=node_id,
        started_at=marked.created_at,
        opened_by=marked.actor_name,
        reason=marked.message[:300],
    )
    hit = list(
        ComputeDomain.objects.filter(
            members__node_id=node_id, members__active=True, phase__in=HIT_PHASES
        ).distinct()
    )
    incident.domains.set(hit)
    record_event(
        actor=Actor(kind=marked.actor_kind, name=marked.actor_name, user=marked.actor_user),
        verb="incident.opened",
        obj=incident,
        node=incident.node,
        message=f"{incident.node.hostname} down"
        + (f": {marked.message}" if marked.message else "")
        + f"; {len(hit)} domain{'s' if len(hit) != 1 else ''} hit",
        details={"incident": incident.pk, "domains": [str(d.uid) for d in hit]},
    )
    return incident


def incident_close(*, node_id: int, at: datetime | None = None) -> Incident | None:
    """The tray is back (marked up, or its Node came back): end its open incident."""
    with transaction.atomic():
        incident = (
            Incident.objects.select_for_update()
            .select_related("node")
            .filter(node_id=node_id, ended_at=None)
            .first()
        )
        if incident is None or incident.node.state == NodeState.DOWN:
            return None
        incident.ended_at = at or timezone.now()
        incident.save(update_fields=["ended_at"])
        record_event(
            actor=SYSTEM,
            verb="incident.closed",
            obj=incident,
            node=incident.node,
            message=f"{incident.node.hostname} back in service",
            details={"incident": incident.pk},
        )
        return incident


def incident_note(*, actor: Actor, incident: Incident, note: str) -> int:
    """An operator's note to the incident's tenants: recorded on the incident and on every
    domain it hit (their pages, events and notifications carry it, word for word). Returns
    how many domains it reached. Refused, naming the field, when empty or too long."""
    note = note.strip()
    if not note:
        raise InvalidInput("write the note the tenants will read", field="note")
    if len(note) > NOTE_MAX:
        raise InvalidInput(
            f"a note holds at most {NOTE_MAX} characters, not {len(note)}", field="note"
        )
    node = incident.node
    with transaction.atomic():
        domains = list(incident.domains.select_related("namespace").order_by("pk"))
        record_event(
            actor=actor,
            verb=NOTE_VERB,
            obj=incident,
            node=node,
            message=note,
            details={"incident": incident.pk, "domains": len(domains)},
        )
        for domain in domains:
            record_event(
                actor=actor,
                verb=TENANT_NOTE_VERB,
                obj=domain,
                node=node,
                message=f"Operator's note on tray {node.hostname} being down: {note}"[:500],
                details={"incident": incident.pk, "nodes": [node.hostname], "note": note},
            )
    return len(domains)


# --- reads -------------------------------------------------------------------------------------


def incidents_visible_to(user: Viewer) -> QuerySet[Incident]:
    """Operators see every incident; nobody else sees any (tenants read the notes on their
    own domains' pages)."""
    qs = Incident.objects.select_related("node", "node__rack")
    return qs if is_operator(user) else qs.none()


def incident_timeline(incident: Incident) -> QuerySet[Event]:
    """What happened to the tray and to the domains it hit while it was down, oldest
    first: the mark-down, the domains turning Degraded or releasing, notes, the mark-up."""
    end = incident.ended_at or timezone.now()
    return (
        Event.objects.select_related("namespace", "domain")
        .filter(
            Q(node_id=incident.node_id) | Q(domain__in=incident.domains.all()),
            created_at__gte=incident.started_at,
            created_at__lte=end,
        )
        .exclude(verb=TENANT_NOTE_VERB)  # a note once (as the incident's), not per domain
        .order_by("created_at", "id")[:TIMELINE_MAX]
    )


def incident_notes(incident: Incident) -> QuerySet[Event]:
    return Event.objects.filter(
        verb=NOTE_VERB, object_type="incident", object_id=str(incident.pk)
    ).order_by("-created_at", "-id")


def domain_incident_notes(domain: ComputeDomain) -> QuerySet[Event]:
    """The operators' notes on the open incidents that hit this domain, newest first."""
    open_ids = list(domain.incidents.filter(ended_at=None).values_list("pk", flat=True))
    return Event.objects.filter(
        domain=domain, verb=TENANT_NOTE_VERB, details__incident__in=open_ids
    ).order_by("-created_at", "-id")


def replaced_down_trays(domain: ComputeDomain) -> list[tuple[str, str, str]]:
    """The trays down now (an open incident) that the domain had and replaced: (the down
    tray, why it is down, the tray that took its place), so its tenant still reads the
    operators' notes about it."""
    incidents = domain.incidents.filter(ended_at=None).select_related("node")
    down = {i.node.hostname: i.reason for i in incidents}
    if not down:
        return []
    replaced = Event.objects.filter(domain=domain, verb="domain.member_replaced").order_by("id")
    took = {e.details.get("old"): e.details.get("new", "") for e in replaced}
    return [(host, why, took[host]) for host, why in sorted(down.items()) if host in took]
