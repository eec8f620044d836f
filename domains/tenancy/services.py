"""Writes to tenancy: namespaces, their quotas and members.

Permission checks belong to the caller (page, API action, management command), which
knows who asks; these services validate input, write, and record who did it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from domains.audit.events import Actor, record_event
from domains.errors import InvalidInput, NameTaken
from domains.tenancy.models import Membership, Namespace, NamespaceSource, Quota, Role
from domains.validators import validate_dns1123_label

QUOTA_COUNTS = (
    "max_gpus",
    "max_nodes",
    "max_domains",
    "max_nodes_per_domain",
    "approval_above_nodes",
)
QUOTA_FIELDS = (*QUOTA_COUNTS, "max_lifetime")


def namespace_create(
    *,
    actor: Actor,
    name: str,
    display_name: str = "",
    labels: dict[str, str] | None = None,
    source: str = NamespaceSource.PORTAL,
    **limits: Any,
) -> Namespace:
    """A new tenant with its quota (limits as in `quota_set`; omitted ones unlimited)."""
    try:
        validate_dns1123_label(name)
    except ValidationError as exc:
        raise InvalidInput(exc.messages[0], field="name")
    clean = _clean_limits(limits)
    try:
        with transaction.atomic():
            namespace = Namespace.objects.create(
                name=name, display_name=display_name[:200], labels=labels or {}, source=source
            )
            Quota.objects.create(namespace=namespace, **clean)
            record_event(
                actor=actor,
                verb="namespace.created",
                obj=namespace,
                details={k: _jsonable(v) for k, v in clean.items()},
            )
    except IntegrityError:
        raise NameTaken(f"namespace {name!r} already exists", field="name")
    return namespace


def quota_set(*, actor: Actor, namespace: Namespace, **limits: Any) -> Quota:
    """Change the given limits (None = unlimited); limits not named stay as they are.

    Lowering a limit below what is in use is allowed: running domains keep running, new
    requests are refused until usage drops.
    """
    clean = _clean_limits(limits)
    with transaction.atomic():
        # Same lock as admission: a quota change and a request never interleave.
        Namespace.objects.select_for_update().get(pk=namespace.pk)
        quota, _ = Quota.objects.get_or_create(namespace=namespace)
        changes = {
            k: {"from": _jsonable(getattr(quota, k)), "to": _jsonable(v)}
            for k, v in clean.items()
            if getattr(quota, k) != v
        }
        if not changes:
            return quota
        for key, value in clean.items():
            setattr(quota, key, value)
        quota.save()
        record_event(
            actor=actor,
            verb="quota.set",
            obj=namespace,
            message=", ".join(f"{k} {c['from']} → {c['to']}" for k, c in changes.items()),
            details=changes,
        )
        return quota


def membership_set(*, actor: Actor, namespace: Namespace, user: User, role: str) -> Membership:
    """Add the user to the namespace or change their role."""
    if role not in Role.values:
        raise InvalidInput(f"must be one of {', '.join(Role.values)}", field="role")
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            user=user, namespace=namespace, defaults={"role": role}
        )
        old = None if created else membership.role
        if old == role:
            return membership
        membership.role = role
        membership.save(update_fields=["role"])
        record_event(
            actor=actor,
            verb="membership.set",
            obj=namespace,
            message=f"{user.get_username()} is now {role}",
            details={"user": user.get_username(), "from": old, "to": role},
        )
        return membership


def membership_remove(*, actor: Actor, namespace: Namespace, user: User) -> bool:
    """Remove the user from the namespace; False (and no event) when they were not in it."""
    with transaction.atomic():
        deleted, _ = Membership.objects.filter(user=user, namespace=namespace).delete()
        if deleted:
            record_event(
                actor=actor,
                verb="membership.removed",
                obj=namespace,
                message=f"{user.get_username()} removed",
                details={"user": user.get_username()},
            )
        return bool(deleted)


def _clean_limits(limits: dict[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in limits.items():
        if key not in QUOTA_FIELDS:
            raise InvalidInput(f"unknown quota limit {key!r}", field=key)
        if value is None or value == "":
            clean[key] = None
        elif key == "max_lifetime":
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise InvalidInput("must be a positive duration or empty", field=key)
            clean[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput("must be a whole number ≥ 0 or empty", field=key)
            clean[key] = value
    return clean


def _jsonable(value: Any) -> Any:
    if isinstance(value, timedelta):
        return int(value.total_seconds())
    return value
