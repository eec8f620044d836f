"""A domain's IMEX ensembles: one per NVLink clique it spans, each its members in that clique.

No table holds them: a clique's ensemble is the domain's active members in that clique
(`DomainMember.clique`, indexes counted inside it) and the clique's channel row. What the
lifecycle says of a domain over several cliques names the clique at fault, so a tenant
reads which rack to look at; a domain in one clique reads as it always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domains.computedomains.models import DomainMember, MemberState
from domains.inventory.models import Clique


@dataclass(frozen=True, slots=True)
class Ensemble:
    """One clique's IMEX ensemble of a domain: its active members there, in index order."""

    clique: Clique
    members: tuple[DomainMember, ...]

    @property
    def ready(self) -> int:
        return sum(1 for m in self.members if m.state == MemberState.READY)


def ensembles(members: Sequence[DomainMember]) -> list[Ensemble]:
    """The domain's ensembles, from its members as read (their `clique` with them, e.g.
    prefetched: no query here), in the order the members come."""
    by_clique: dict[int, list[DomainMember]] = {}
    for member in members:
        if member.active:
            by_clique.setdefault(member.clique_id, []).append(member)
    return [
        Ensemble(clique=held[0].clique, members=tuple(sorted(held, key=lambda m: m.index)))
        for held in by_clique.values()
    ]


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
