"""`manage.py seed_demo`: racks, cliques, trays, GPUs, demo tenants and an agent join token."""

from __future__ import annotations

import os
import re
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from domains.agents.models import JoinToken
from domains.demo.domains import seed_demo_domains
from domains.inventory.seed import DEFAULT_LAYOUTS, RackLayout, build_fabric
from domains.notifications.models import Channel, Kind, Subscription
from domains.notifications.services import subscription_create
from domains.security import hash_token
from domains.tenancy.seed import DEMO_PASSWORD, build_demo_tenants

# Every emulated IMEX daemon listens on its tray's address, port 50000: two demos on one
# host must seed their trays on different loopback ranges, or the second's daemons exit
# with "Address already in use".
IP_PREFIX_ENV = "PORTAL_DEMO_IP_PREFIX"
IP_PREFIX = re.compile(r"(25[0-5]|2[0-4]\d|1?\d?\d)\.(25[0-5]|2[0-4]\d|1?\d?\d)")


class Command(BaseCommand):
    help = "Build a realistic GB200 NVL72 fabric and demo tenants (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--racks", type=int, default=None, help="Number of racks (default: 2, or layouts)."
        )
        parser.add_argument(
            "--layout",
            action="append",
            default=None,
            help="Clique sizes per rack, e.g. 18 or 9,9; repeat per rack, the last one "
            "repeats. Default: rack 1 = 18, rack 2 = 9,9.",
        )
        parser.add_argument(
            "--ip-prefix",
            default=os.environ.get(IP_PREFIX_ENV) or "127.0",
            help="Trays get <prefix>.<rack>.<slot>, their emulated IMEX daemons listen there "
            f"(default: ${IP_PREFIX_ENV}, else 127.0). A second demo on the same host needs "
            "its own, e.g. 127.1; set when the fabric is first seeded.",
        )
        parser.add_argument("--hostname-prefix", default="gb")
        parser.add_argument("--no-users", action="store_true", help="Skip demo tenants/users.")
        parser.add_argument(
            "--no-domains",
            action="store_true",
            help="Skip the demo's domains (requests in several phases and a cordoned tray).",
        )
        parser.add_argument(
            "--join-token",
            default=settings.PORTAL["AGENT_JOIN_TOKEN"],
            help="Register this agent join token (for the demo's node agents).",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if not IP_PREFIX.fullmatch(opts["ip_prefix"]):
            raise CommandError(
                f"--ip-prefix / ${IP_PREFIX_ENV} must be two numbers 0-255 such as 127.1, "
                f"not {opts['ip_prefix']!r}"
            )
        try:
            layouts = self._layouts(opts["racks"], opts["layout"])
            racks = build_fabric(
                layouts, ip_prefix=opts["ip_prefix"], hostname_prefix=opts["hostname_prefix"]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        trays = sum(sum(layout.cliques) for layout in layouts)
        self.stdout.write(f"fabric: {len(racks)} racks, {trays} compute trays, {trays * 4} GPUs")
        if opts["join_token"]:
            JoinToken.objects.get_or_create(
                token_hash=hash_token(opts["join_token"]), defaults={"name": "demo agents"}
            )
            self.stdout.write("agent join token registered")
        if opts["no_users"]:
            return
        if not settings.DEBUG:
            self.stdout.write(self.style.WARNING("DEBUG is off: demo logins will be refused."))
        for username, description in build_demo_tenants():
            self.stdout.write(f"  login {username:9} / {DEMO_PASSWORD}   {description}")
        _subscribe_demo_users()
        if not opts["no_domains"]:
            for what, line in seed_demo_domains():
                self.stdout.write(f"  {what:7} {line}")

    @staticmethod
    def _layouts(racks: int | None, texts: list[str] | None) -> list[RackLayout]:
        if not texts:
            base = list(DEFAULT_LAYOUTS)
            count = racks or len(base)
            return (base + [base[-1]] * count)[:count] if count > len(base) else base[:count]
        parsed = [RackLayout.parse(t) for t in texts]
        count = racks or len(parsed)
        return parsed[:count] + [parsed[-1]] * max(0, count - len(parsed))


def _subscribe_demo_users() -> None:
    """Every demo login hears of everything it may see in the portal's navbar (idempotent)."""
    for user in User.objects.filter(username__in=["operator", "admin", "alice", "bob"]):
        if not Subscription.objects.filter(user=user, channel=Channel.IN_APP).exists():
            subscription_create(user=user, channel=Channel.IN_APP, kinds=list(Kind.values))
