"""Join tokens: the secrets node agents present to register trays.

Minted here, listed here and revoked here, whichever door the request comes in by (the
Django admin, `manage.py join_token`). A join token registers new trays only (a known tray
re-joins only under the rules of `agent_join`), so what limits the damage of a leaked one is
that it expires, may be used a fixed number of times, and can be revoked at once. The raw
token is returned once and stored only as its hash; it is counted and checked at join time
(`services._check_join_token`, `selectors.usable_join_token`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from domains.agents.models import JoinToken
from domains.audit.events import Actor, record_event
from domains.errors import InvalidInput, InvalidTransition
from domains.security import generate_token, hash_token
from domains.tenancy.selectors import Viewer, is_admin

TOKEN_KIND = "dpj"  # noqa: S105 - the prefix that names the kind, not a secret
MAX_EXPIRY = timedelta(days=365)
DEFAULT_EXPIRY = timedelta(hours=24)
_NAME_MAX = JoinToken._meta.get_field("name").max_length or 100


def _validate(name: str, expires_in: timedelta, max_uses: int | None) -> str:
    name = name.strip()
    if not name:
        raise InvalidInput("name: give the token a name", field="name")
    if len(name) > _NAME_MAX:
        raise InvalidInput(f"name: at most {_NAME_MAX} characters", field="name")
    if not timedelta(0) < expires_in <= MAX_EXPIRY:
        raise InvalidInput(
            f"expires_in: more than 0 and at most {MAX_EXPIRY.days} days", field="expires_in"
        )
    if max_uses is not None and max_uses < 1:
        raise InvalidInput("max_uses: at least 1, or none for no limit", field="max_uses")
    return name


@transaction.atomic
def join_token_create(
    *,
    actor: Actor,
    name: str,
    expires_in: timedelta = DEFAULT_EXPIRY,
    max_uses: int | None = None,
) -> tuple[JoinToken, str]:
    """Mint a join token; returns the row and the raw secret (shown once, never stored)."""
    name = _validate(name, expires_in, max_uses)
    raw = generate_token(TOKEN_KIND)
    expires_at = timezone.now() + expires_in
    token = JoinToken.objects.create(
        name=name,
        token_hash=hash_token(raw),
        created_by=actor.saved_user,
        expires_at=expires_at,
        max_uses=max_uses,
    )
    record_event(
        actor=actor,
        verb="join_token.created",
        obj=token,
        message=f"join token {name!r} created: {join_token_limits(token)}",
        details={"expires_at": expires_at.isoformat(), "max_uses": max_uses},
    )
    return token, raw


@transaction.atomic
def join_token_revoke(*, actor: Actor, token: JoinToken) -> JoinToken:
    """Revoke a join token now: agents presenting it are refused from then on."""
    now = timezone.now()
    if JoinToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now) != 1:
        raise InvalidTransition(f"join token {token.name!r} is revoked already")
    token.refresh_from_db()
    record_event(
        actor=actor,
        verb="join_token.revoked",
        obj=token,
        message=f"join token {token.name!r} revoked after {token.uses} use(s)",
    )
    return token


def join_tokens_list() -> QuerySet[JoinToken]:
    """Every join token, newest first, with who made it."""
    return JoinToken.objects.select_related("created_by").order_by("-created_at", "-pk")


def join_tokens_visible_to(user: Viewer) -> QuerySet[JoinToken]:
    """Join tokens are the fleet's keys: portal admins see them all, nobody else any."""
    return join_tokens_list() if is_admin(user) else JoinToken.objects.none()


def join_token_named(ref: str) -> JoinToken:
    """The join token with this id, or the only one with this name (for the command line)."""
    rows = join_tokens_list()
    found = list(rows.filter(pk=int(ref))) if ref.isdigit() else list(rows.filter(name=ref)[:2])
    if len(found) != 1:
        what = "no join token" if not found else "more than one join token"
        raise InvalidInput(f"{what} named {ref!r}; give its id", field="token")
    return found[0]


def join_token_state(token: JoinToken, now: datetime | None = None) -> str:
    """`usable`, `revoked`, `expired` or `used up`: whether an agent may join with it now."""
    now = now or timezone.now()
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and token.expires_at <= now:
        return "expired"
    if token.max_uses is not None and token.uses >= token.max_uses:
        return "used up"
    return "usable"


def join_token_limits(token: JoinToken) -> str:
    """'expires 2026-11-27 21:00 UTC, 3 of 18 uses' — for lists and messages."""
    expiry = f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "no expiry"
    uses = f"{token.uses} of {token.max_uses} uses" if token.max_uses else f"{token.uses} uses"
    return f"{expiry}, {uses}"
