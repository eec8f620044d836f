"""`manage.py join_token create NAME [--expires-in HOURS] [--max-uses N]`, `join_token list`,
`join_token revoke ID|NAME`: the fleet's join tokens from the command line.

`create` prints the secret once on stdout (and nothing else there), so
`JOIN_TOKEN=$(manage.py join_token create rack-7 --max-uses 18)` works; what it made goes
to stderr. Every sub-command calls the same services as the Django admin.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from domains.agents.jointokens import (
    DEFAULT_EXPIRY,
    join_token_create,
    join_token_limits,
    join_token_named,
    join_token_revoke,
    join_token_state,
    join_tokens_list,
)
from domains.audit.events import SYSTEM
from domains.errors import DomainError


class Command(BaseCommand):
    help = "Create, list or revoke the join tokens node agents register trays with."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True)
        create = verbs.add_parser("create", help="Mint a token and print it (shown only once).")
        create.add_argument("name", help="What it is for, e.g. the rack being installed.")
        create.add_argument(
            "--expires-in",
            type=float,
            default=DEFAULT_EXPIRY.total_seconds() / 3600,
            metavar="HOURS",
            help="Refused after this many hours (default 24, at most a year).",
        )
        create.add_argument(
            "--max-uses", type=int, default=None, metavar="N", help="Trays it may register."
        )
        verbs.add_parser("list", help="Every join token, newest first.")
        revoke = verbs.add_parser("revoke", help="Refuse the token from now on.")
        revoke.add_argument("token", help="The token's id, or its name when that is unique.")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            getattr(self, f"_{opts['verb']}")(opts)
        except DomainError as exc:
            raise CommandError(exc.message) from None

    def _create(self, opts: dict[str, Any]) -> None:
        token, raw = join_token_create(
            actor=SYSTEM,
            name=opts["name"],
            expires_in=timedelta(hours=opts["expires_in"]),
            max_uses=opts["max_uses"],
        )
        self.stdout.write(raw)
        self.stderr.write(f"join token {token.pk} {token.name!r}: {join_token_limits(token)}")

    def _list(self, opts: dict[str, Any]) -> None:
        for token in join_tokens_list():
            self.stdout.write(
                f"{token.pk:>5}  {join_token_state(token):<8}  {token.name}  "
                f"({join_token_limits(token)})"
            )

    def _revoke(self, opts: dict[str, Any]) -> None:
        token = join_token_revoke(actor=SYSTEM, token=join_token_named(opts["token"]))
        self.stderr.write(f"join token {token.pk} {token.name!r} revoked")
