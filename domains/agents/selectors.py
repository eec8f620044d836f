"""Reads for the agent protocol."""

from __future__ import annotations

import functools

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agentwire.messages import Step
from domains.agents.models import JoinToken
from domains.computedomains.models import ComputeDomain, DomainMember, Phase
from domains.inventory.models import Node
from domains.security import hash_token
from domains.sqlnames import statement


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


def reports_settled(domain_id: int) -> bool:
    """Whether every active member of a forming domain has reported ready (of a releasing
    one, clean) about that domain, as its tray stored its latest report: the burst of
    reports is over, and folding it need not wait for more. A hint for timing only, the
    fold decides what the reports mean; one statement, asked by every report that changes
    its member (hand-written: through the ORM, building the query cost more than the
    report's own statement)."""
    params: list[str | int] = [Phase.FORMING, Step.READY, Phase.RELEASING, domain_id]
    with connection.cursor() as cursor:
        cursor.execute(_settled_sql(), params)
        row = cursor.fetchone()
    return bool(row and row[0])


_SETTLED_SQL = (
    "SELECT count(*) > 0 AND count(*) = count(*) FILTER ("
    " WHERE n.{node.agent_report} ->> 'domain_uid' = d.{domain.uid}::text AND ("
    " (d.{domain.phase} = %s AND n.{node.agent_report} ->> 'step' = %s)"
    " OR (d.{domain.phase} = %s AND n.{node.agent_report} -> 'clean' = 'true'::jsonb)))"
    " FROM {member} AS m JOIN {node} AS n ON n.{node.id} = m.{member.node}"
    " JOIN {domain} AS d ON d.{domain.id} = m.{member.domain}"
    " WHERE m.{member.domain} = %s AND m.{member.active}"
)


@functools.cache
def _settled_sql() -> str:
    return statement(_SETTLED_SQL, node=Node, member=DomainMember, domain=ComputeDomain)
