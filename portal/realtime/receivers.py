"""Turn the business's after-commit signals into small websocket hints for browsers.

domain_changed → the domain's, its namespace's and the operators' groups;
node_changed → the operators' group; event_recorded → the groups of its domain and
namespace; notification_created (in-app) → its owner's own group. Each message says only
what changed; pages re-fetch what they show. Sending is best effort: the change is already
committed, and a page that missed a hint catches up on its next (re)connect.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from domains import signals
from domains.tenancy.models import Membership
from portal.realtime.groups import (
    domain_group,
    fabric_group,
    namespace_group,
    send_to_groups,
    session_group,
    user_group,
    user_sockets_group,
)


def _send(groups: list[str], payload: dict[str, Any]) -> None:
    # The groups travel with the hint: a socket that has just left one (a membership ended)
    # drops a hint already on its way through it (LiveConsumer.live_update).
    send_to_groups(groups, {"type": "live.update", "payload": payload, "groups": groups})


@receiver(signals.domain_changed, dispatch_uid="portal.realtime.receivers.domain")
def domain_changed(
    sender: Any, domain_uid: str, namespace_id: int, phase: str, **kwargs: Any
) -> None:
    _send(
        [domain_group(domain_uid), namespace_group(namespace_id), fabric_group()],
        {"kind": "domain", "uid": domain_uid, "phase": str(phase)},
    )


@receiver(signals.node_changed, dispatch_uid="portal.realtime.receivers.node")
def node_changed(sender: Any, node_ids: list[int], **kwargs: Any) -> None:
    _send([fabric_group()], {"kind": "node", "ids": list(node_ids)[:100]})


@receiver(signals.event_recorded, dispatch_uid="portal.realtime.receivers.event")
def event_recorded(
    sender: Any,
    event_id: int,
    namespace_id: int | None = None,
    domain_uid: str | None = None,
    **kwargs: Any,
) -> None:
    groups = []
    if domain_uid:
        groups.append(domain_group(domain_uid))
    if namespace_id:
        groups.append(namespace_group(namespace_id))
    _send(groups, {"kind": "event", "id": event_id, "uid": domain_uid or ""})


@receiver(signals.notification_created, dispatch_uid="portal.realtime.receivers.notification")
def notification_created(
    sender: Any, notification_id: int, channel: str, user_id: int, **kwargs: Any
) -> None:
    """A new in-app notification: its owner's pages refresh the navbar badge."""
    if channel == "in_app":
        _send([user_group(user_id)], {"kind": "notification", "id": notification_id})


@receiver(post_delete, sender=Membership, dispatch_uid="portal.realtime.receivers.membership")
def membership_ended(sender: Any, instance: Membership, **kwargs: Any) -> None:
    """A membership ended (removed, its namespace deleted, in Django admin): that person's
    open sockets leave the namespace's groups once it is committed."""
    user_id = instance.user_id
    transaction.on_commit(
        lambda: send_to_groups(
            [user_sockets_group(user_id)], {"type": "access.changed"}, barrier=True
        )
    )


@receiver(user_logged_out, dispatch_uid="portal.realtime.receivers.logout")
def session_ended(sender: Any, request: Any = None, **kwargs: Any) -> None:
    """A session logged out: its open sockets close (they would go on hearing hints)."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        send_to_groups([session_group(key)], {"type": "session.ended"}, barrier=True)
