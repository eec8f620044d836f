"""Who did it (`Actor`) and the one way to write it down (`record_event`).

Every state change writes one `Event` (actor, verb, object, request id, details) in the
same transaction as the change; listeners hear of it once that transaction commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from django.contrib.auth.models import User
from django.db import models
from django.db.models.expressions import RawSQL
from django.utils import timezone

from domains import signals
from domains.audit.models import ActorKind, Event
from domains.context import get_request_id
from domains.signals import after_commit

# Every app above records events through this module, so it names none of their models,
# not even for annotations: an event's namespace, domain and node are typed `Row` here, and
# Django itself refuses an instance of the wrong model for each foreign key when the event
# is made (ValueError).
Row = Any


class _Tray(Protocol):
    @property
    def hostname(self) -> str: ...


@dataclass(frozen=True)
class Actor:
    """Who did it: a user, a node agent, the controller, Kubernetes or the system."""

    kind: str
    name: str
    user: User | None = None

    @classmethod
    def for_user(cls, user: User) -> Actor:
        return cls(kind=ActorKind.USER, name=user.get_username(), user=user)

    @classmethod
    def for_agent(cls, node: _Tray) -> Actor:
        return cls(kind=ActorKind.AGENT, name=f"agent:{node.hostname}")

    @property
    def saved_user(self) -> User | None:
        """The user, when it is a row a foreign key can point at (not an unsaved stand-in)."""
        return self.user if self.user is not None and self.user.pk else None


CONTROLLER = Actor(kind=ActorKind.CONTROLLER, name="controller")
KUBERNETES = Actor(kind=ActorKind.KUBERNETES, name="kubernetes")
SYSTEM = Actor(kind=ActorKind.SYSTEM, name="system")


def record_event(
    *,
    actor: Actor,
    verb: str,
    obj: models.Model,
    message: str = "",
    namespace: Row | None = None,
    domain: Row | None = None,
    node: Row | None = None,
    details: dict[str, Any] | None = None,
) -> Event:
    """Write one audit/timeline line. `obj` also fills the event's own foreign key to its
    model (a domain is the event's domain, a tray its node); a domain brings its namespace."""
    event = new_event(
        actor=actor,
        verb=verb,
        obj=obj,
        message=message,
        namespace=namespace,
        domain=domain,
        node=node,
        details=details,
    )
    event.save(force_insert=True)
    _announce(event)
    return event


# A refusal repeated within this long of the first is counted on its row, not written anew.
REFUSAL_BURST = timedelta(minutes=5)


def record_refusal(
    *, actor: Actor, verb: str, obj: models.Model, message: str, details: dict[str, Any]
) -> bool:
    """Write a refusal (someone tried what they may not) once per burst: the first of a
    burst is a line of its own; each one after it, from the same actor with the same verb
    on the same object within REFUSAL_BURST, only counts on that line (`details.count`,
    `details.last_at`), so 300 refused requests are one line that says 300, not 300 lines.
    Returns whether this one began a burst (the caller logs only those)."""
    event = new_event(actor=actor, verb=verb, obj=obj, message=message, details=details)
    since = timezone.now() - REFUSAL_BURST
    first = (
        Event.objects.filter(
            verb=verb,
            actor_name=event.actor_name,
            object_type=event.object_type,
            object_id=event.object_id,
            created_at__gte=since,
        )
        .order_by("-id")
        .values_list("pk", flat=True)
        .first()
    )
    if first is None:
        event.details = {**event.details, "count": 1}
        event.save(force_insert=True)
        _announce(event)
        return True
    counted = RawSQL(
        "jsonb_set(jsonb_set(details, '{count}', "
        "to_jsonb(COALESCE((details->>'count')::int, 1) + 1)), '{last_at}', to_jsonb(%s::text))",
        (timezone.now().isoformat(),),
    )
    Event.objects.filter(pk=first).update(details=counted)
    return False


def new_event(
    *,
    actor: Actor,
    verb: str,
    obj: models.Model,
    message: str = "",
    namespace: Row | None = None,
    domain: Row | None = None,
    node: Row | None = None,
    details: dict[str, Any] | None = None,
) -> Event:
    """The line `record_event` would write, not saved yet (for `record_events`)."""
    namespace = namespace or _if_target(obj, "namespace")
    domain = domain or _if_target(obj, "domain")
    node = node or _if_target(obj, "node")
    if domain is not None and namespace is None:
        namespace = domain.namespace
    return Event(
        actor_kind=actor.kind,
        actor_user=actor.saved_user,
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


def record_events(events: list[Event]) -> None:
    """Write several lines made by `new_event` in one INSERT (a batch of one change, such as
    the members of a domain reporting at once); each is announced as `record_event` does."""
    for event in Event.objects.bulk_create(events):
        _announce(event)


def _if_target(obj: models.Model, field: str) -> Any:
    """`obj` when it is an instance of the model the event's `field` points at, else None."""
    model = Event._meta.get_field(field).related_model
    return obj if isinstance(model, type) and isinstance(obj, model) else None


def _announce(event: Event) -> None:
    ns_id = event.namespace_id
    domain_uid = str(event.domain.uid) if event.domain_id and event.domain else None
    verb = event.verb
    after_commit(
        signals.event_recorded,
        Event,
        event_id=event.pk,
        namespace_id=ns_id,
        domain_uid=domain_uid,
        verb=verb,
    )
