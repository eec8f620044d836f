"""`manage.py create_token USER [--name N] [--read-only] [--expires-in DAYS]`.

For bootstrapping scripts and CI before anyone has signed in to the UI. Prints the secret
once on stdout (and nothing else there), so `TOKEN=$(manage.py create_token ci)` works.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from domains.audit.events import SYSTEM
from domains.errors import DomainError
from domains.tenancy.tokens import token_create


class Command(BaseCommand):
    help = "Create a personal API token for USER and print it (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="Username the token acts as.")
        parser.add_argument("--name", default="cli", help="Label shown in the token list.")
        parser.add_argument(
            "--read-only", action="store_true", help="Only GET/HEAD/OPTIONS are allowed."
        )
        parser.add_argument(
            "--expires-in", type=int, default=None, metavar="DAYS", help="Expire after DAYS days."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: opts["user"]})
        except User.DoesNotExist:
            raise CommandError(f"no user named {opts['user']!r}")
        if not user.is_active:
            raise CommandError(f"user {opts['user']!r} is inactive")
        days = opts["expires_in"]
        if days is not None and days <= 0:
            raise CommandError("--expires-in: give a positive number of days")
        try:
            token, raw = token_create(
                actor=SYSTEM,
                user=user,
                name=opts["name"],
                read_only=opts["read_only"],
                expires_in=timedelta(days=days) if days is not None else None,
            )
        except DomainError as exc:
            raise CommandError(exc.message)
        self.stdout.write(raw)
        expiry = "no expiry"
        if token.expires_at:
            expiry = f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC"
        access = "read-only" if token.read_only else "read-write"
        self.stderr.write(f"token {token.prefix}… for {user.get_username()}: {access}, {expiry}")
