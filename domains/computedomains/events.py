"""Recording events and announcing changes after commit.

Every state change writes one `Event` (actor, verb, object, request id, details) in the same
transaction as the change, and announces it once that transaction commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction

from domains import signals
from domains.computedomains.models import ActorKind, ComputeDomain, Event
from domains.context import get_request_id
from domains.inventory.models import Node
from domains.tenancy.models import Namespace


@dataclass(frozen=True)
class Actor:
    """Who did it: a user, a node agent, the controller, Kubernetes or the system."""

    kind: str
    name: str
    user: AbstractBaseUser | None = None

    @classmethod
    def for_user(cls, user: AbstractBaseUser) -> Actor:
        return cls(kind=ActorKind.USER, name=user.get_username(), user=user)

    @classmethod
    def for_agent(cls, node: Node) -> Actor:
        return cls(kind=ActorKind.AGENT, name=f"agent:{node.hostname}")


CONTROLLER = Actor(kind=ActorKind.CONTROLLER, name="controller")
KUBERNETES = Actor(kind=ActorKind.KUBERNETES, name="kubernetes")
SYSTEM = Actor(kind=ActorKind.SYSTEM, name="system")


def record_event(
    *,
    actor: Actor,
    verb: str,
    obj: models.Model,
    message: str = "",
    namespace: Namespace | None = None,
    domain: ComputeDomain | None = None,
    node: Node | None = None,
    details: dict[str, Any] | None = None,
) -> Event:
    """Write one audit/timeline line; namespace/domain/node are inferred from `obj`."""
    if isinstance(obj, ComputeDomain):
        domain = domain or obj
    if isinstance(obj, Node):
        node = node or obj
    if isinstance(obj, Namespace):
        namespace = namespace or obj
    if domain is not None and namespace is None:
        namespace = domain.namespace
    event = Event.objects.create(
        actor_kind=actor.kind,
        actor_user=actor.user if actor.user is not None and actor.user.pk else None,
        actor_name=actor.name[:150],
        verb=verb,
        object_type=obj._meta.model_name or "",
        object_id=str(getattr(obj, "uid", None) or obj.pk),
        object_repr=str(obj)[:200],
        namespace=namespace,
        domain=domain,
        node=node,
        request_id=get_request_id(),
        message=message[:500],
        details=details or {},
    )
    ns_id = namespace.pk if namespace else None
    domain_uid = str(domain.uid) if domain else None
    transaction.on_commit(
        lambda: signals.event_recorded.send(
            sender=Event, event_id=event.pk, namespace_id=ns_id, domain_uid=domain_uid
        )
    )
    return event


def announce_domain(domain: ComputeDomain) -> None:
    """Tell listeners, after commit, that this domain's status changed."""
    uid, ns_id, phase = str(domain.uid), domain.namespace_id, domain.phase
    transaction.on_commit(
        lambda: signals.domain_changed.send(
            sender=ComputeDomain, domain_uid=uid, namespace_id=ns_id, phase=phase
        )
    )


def announce_nodes(node_ids: Iterable[int]) -> None:
    """Tell listeners, after commit, that these trays changed (state, membership)."""
    ids = sorted(set(node_ids))
    if ids:
        transaction.on_commit(lambda: signals.node_changed.send(sender=Node, node_ids=ids))


def announce_desired_state(node_ids: Iterable[int]) -> None:
    """Nudge these trays' agents, after commit, to fetch their desired state now."""
    ids = sorted(set(node_ids))
    if ids:
        transaction.on_commit(lambda: signals.desired_state_changed.send(sender=Node, node_ids=ids))
