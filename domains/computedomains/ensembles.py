"""A domain's IMEX ensembles: one per NVLink clique it spans, each its members in that clique.

No table holds them: a clique's ensemble is the domain's active members in that clique
(`DomainMember.clique`, indexes counted inside it) and the clique's channel row. What the
lifecycle says of a domain over several cliques names the clique at fault, so a tenant
reads which rack to look at; a domain in one clique reads as it always did.
"""

from __future__ import annotations

from collections.abc import Sequence

from domains.computedomains.models import DomainMember
from domains.inventory.models import Clique


def spanned(members: Sequence[DomainMember]) -> int:
    """How many cliques the active members are in."""
    return len({m.clique_id for m in members if m.active})


def where_not_ready(not_ready: Sequence[DomainMember], members: Sequence[DomainMember]) -> str:
    """'clique r002-c0 (rack r002)' for the cliques of the members not ready, when the
    domain spans several ("" in one clique: the trays' names say it all). One query."""
    if spanned(members) < 2:
        return ""
    ids = list(dict.fromkeys(m.clique_id for m in not_ready))
    named = {
        pk: f"clique {name} (rack {rack})" if rack else f"clique {name}"
        for pk, name, rack in Clique.objects.filter(pk__in=ids).values_list(
            "pk", "name", "rack__name"
        )
    }
    return ", ".join(named.get(pk, f"clique #{pk}") for pk in ids)


def others_up(not_ready: Sequence[DomainMember], members: Sequence[DomainMember]) -> str:
    """'; the other clique is up' / '; the other 3 cliques are up' ("" when none is)."""
    up = spanned(members) - len({m.clique_id for m in not_ready})
    if up <= 0 or spanned(members) < 2:
        return ""
    return "; the other clique is up" if up == 1 else f"; the other {up} cliques are up"
