"""Reads for the agent protocol."""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from domains.agents.models import JoinToken
from domains.inventory.models import Node
from domains.security import hash_token


def node_for_token(raw: str) -> Node | None:
    """The tray a node token belongs to (lookup by hash; the raw token is never stored)."""
    if not raw:
        return None
    # Every agent request starts here. Node's default ordering joins the rack, and its
    # last report is a JSON blob nobody reads on this path: leave both out.
    return (
        Node.objects.filter(agent_token_hash=hash_token(raw), gone=False)
        .order_by()
        .defer("agent_report")
        .first()
    )


def usable_join_token(raw: str) -> JoinToken | None:
    """A join token row that is not revoked, not expired and not used up."""
    now = timezone.now()
    return (
        JoinToken.objects.filter(token_hash=hash_token(raw), revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
