"""Personal API tokens: created, revoked and checked here, and nowhere else.

A token is shown once, at creation, and stored only as its SHA-256 hash (domains.security).
A user may hold several (one per script or CI job), each optionally read-only and
optionally expiring. A token minted with another token (over the API) is that token's
child: it never outlives its parent (its expiry is capped at the parent's), it is read-only
if the parent is, and revoking the parent revokes it and its own children. So a short-lived
or read-only token cannot mint itself a longer or wider life. `last_used_at` is written at
most once a minute per token so that a busy script does not turn every API read into a
database write.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from domains.audit.events import Actor, record_event
from domains.errors import InvalidInput
from domains.security import generate_token, hash_token, token_prefix
from domains.tenancy.models import ApiToken

TOKEN_KIND = "dpt"  # noqa: S105 (the public prefix of user tokens, not a secret)
NAME_MAX = 100
MAX_EXPIRY = timedelta(days=3650)
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _validate(name: str, expires_in: timedelta | None) -> str:
    name = (name or "").strip()
    if not name:
        raise InvalidInput("name: give the token a name, e.g. the script using it", field="name")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"name: at most {NAME_MAX} characters", field="name")
    if expires_in is not None and not (timedelta(0) < expires_in <= MAX_EXPIRY):
        raise InvalidInput(
            f"expiresIn: must be more than 0 and at most {MAX_EXPIRY.days} days",
            field="expiresIn",
        )
    return name


@transaction.atomic
def token_create(
    *,
    actor: Actor,
    user: User,
    name: str,
    read_only: bool = False,
    expires_in: timedelta | None = None,
    parent: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """Mint a token for `user`; returns the row and the raw secret (shown once, never stored).

    `parent` is the token the request came with, if any: the new token expires no later than
    it, is read-only if it is, and dies with it."""
    name = _validate(name, expires_in)
    now = timezone.now()
    expires_at = now + expires_in if expires_in is not None else None
    if parent is not None:
        parent = _live_parent(parent, user=user, now=now)
        read_only = read_only or parent.read_only
        if parent.expires_at is not None and (expires_at is None or expires_at > parent.expires_at):
            expires_at = parent.expires_at
    raw = generate_token(TOKEN_KIND)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=token_prefix(raw),
        token_hash=hash_token(raw),
        read_only=read_only,
        expires_at=expires_at,
        parent=parent,
    )
    details: dict[str, Any] = {"read_only": read_only, "expires_at": _iso(token.expires_at)}
    if parent is not None:
        details["parent"] = parent.prefix
    record_event(
        actor=actor,
        verb="token.created",
        obj=token,
        message=f"API token {name!r} ({token.prefix}…) created for {user.get_username()}",
        details=details,
    )
    return token, raw


def _live_parent(parent: ApiToken, *, user: User, now: datetime) -> ApiToken:
    # Locked, so a revocation running at the same time either comes first (and this refuses)
    # or waits for this token to be committed (and then revokes it with its parent).
    locked = ApiToken.objects.select_for_update().get(pk=parent.pk)
    expired = locked.expires_at is not None and locked.expires_at <= now
    if locked.revoked_at is not None or expired or locked.user_id != user.pk:
        raise InvalidInput(
            "token: the token this request came with is no longer valid", field="token"
        )
    return locked


@transaction.atomic
def token_revoke(*, actor: Actor, token: ApiToken) -> ApiToken:
    """Idempotent: a revoked token stays revoked, with its first revocation time. The tokens
    it minted, and theirs, are revoked with it."""
    now = timezone.now()
    revoked = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
    token.refresh_from_db()
    if revoked:
        record_event(
            actor=actor,
            verb="token.revoked",
            obj=token,
            message=f"API token {token.name!r} ({token.prefix}…) revoked",
        )
    _revoke_descendants(actor=actor, token=token, now=now)
    return token


def _revoke_descendants(*, actor: Actor, token: ApiToken, now: datetime) -> None:
    generation = [token.pk]
    while generation:
        children = list(
            ApiToken.objects.select_for_update().filter(
                parent_id__in=generation, revoked_at__isnull=True
            )
        )
        ApiToken.objects.filter(pk__in=[c.pk for c in children]).update(revoked_at=now)
        for child in children:
            record_event(
                actor=actor,
                verb="token.revoked",
                obj=child,
                message=f"API token {child.name!r} ({child.prefix}…) revoked with the token "
                f"that minted it ({token.prefix}…)",
            )
        generation = [c.pk for c in children]


def token_authenticate(raw: str) -> ApiToken | None:
    """The live token for this secret (user loaded), or None; records its use."""
    if not raw.startswith(f"{TOKEN_KIND}_"):
        return None
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_token(raw), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        # Revocation cascades (token_revoke) and expiry is capped (token_create); this also
        # holds a child to its parent however the parent came to be revoked or expired.
        .filter(
            Q(parent__isnull=True)
            | Q(parent__revoked_at__isnull=True)
            & (Q(parent__expires_at__isnull=True) | Q(parent__expires_at__gt=now))
        )
        .first()
    )
    if token is None:
        return None
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
        # Compare-and-set, so concurrent requests write the time once.
        ApiToken.objects.filter(pk=token.pk, last_used_at=token.last_used_at).update(
            last_used_at=now
        )
        token.last_used_at = now
    return token


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
