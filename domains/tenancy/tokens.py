"""Personal API tokens: created, revoked and checked here, and nowhere else.

A token is shown once, at creation, and stored only as its SHA-256 hash (domains.security).
A user may hold several (one per script or CI job), each optionally read-only and
optionally expiring. `last_used_at` is written at most once a minute per token so that a
busy script does not turn every API read into a database write.
"""

from __future__ import annotations

from datetime import timedelta
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
) -> tuple[ApiToken, str]:
    """Mint a token for `user`; returns the row and the raw secret (shown once, never stored)."""
    name = _validate(name, expires_in)
    raw = generate_token(TOKEN_KIND)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=token_prefix(raw),
        token_hash=hash_token(raw),
        read_only=read_only,
        expires_at=timezone.now() + expires_in if expires_in is not None else None,
    )
    record_event(
        actor=actor,
        verb="token.created",
        obj=token,
        message=f"API token {name!r} ({token.prefix}…) created for {user.get_username()}",
        details={"read_only": read_only, "expires_at": _iso(token.expires_at)},
    )
    return token, raw


@transaction.atomic
def token_revoke(*, actor: Actor, token: ApiToken) -> ApiToken:
    """Idempotent: a revoked token stays revoked, with its first revocation time."""
    revoked = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token.refresh_from_db()
    if revoked:
        record_event(
            actor=actor,
            verb="token.revoked",
            obj=token,
            message=f"API token {token.name!r} ({token.prefix}…) revoked",
        )
    return token


def token_authenticate(raw: str) -> ApiToken | None:
    """The live token for this secret (user loaded), or None; records its use."""
    if not raw.startswith(f"{TOKEN_KIND}_"):
        return None
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_token(raw), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
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
