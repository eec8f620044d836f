"""Placement over several NVLink cliques: one ComputeDomain, one IMEX ensemble per clique.

`plan()` is where a placed domain goes: one clique when it asks for one, or when it asks
for no count and fits the largest clique its constraint allows (best fit, `place()`, as
always); otherwise `place_across()`:

- **No count asked** (a request larger than any allowed clique): the *fewest* cliques that
  hold it. Among the sets of that many cliques, the one with the fewest free trays left
  over (best fit again: small holes are filled first, whole free cliques stay whole for
  whole-rack requests; on a tie the set whose largest clique is smallest). Every clique of
  the set is taken whole (all its free trays) but one, which gives the rest of the domain
  from its tightest run of free slots, as `place()` takes trays inside a clique.
- **`cliques: N` or `racks: N`** (N racks, one clique in each): exactly N parts of
  `num_nodes / N` trays each (the first `num_nodes % N` one more), each from the clique
  with the fewest free trays that holds its share (a job spread over N racks on purpose
  runs N equal groups).

Every answer says which racks and why (`SpanningPlacement.reasons`), for the request
form's preview and the API's dry run. Pure, deterministic and O(trays).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

# The one-clique helpers, shared inside this package: the same candidates and the same
# choice of trays inside a clique as `place()`.
from domains.placement.algorithm import _candidates, _tightest_trays, place, where
from domains.placement.model import (
    CliqueView,
    Placement,
    PlacementRequest,
    Rejection,
    SpanningPlacement,
    Topology,
    Tray,
)

# A clique with the trays a request could take there (free, big enough, clear of
# maintenance), in slot order, and its position in topology order.
Pool = tuple[int, CliqueView, list[Tray]]
CANNOT_SPAN = "but a domain cannot span cliques"  # place()'s words for one clique only


def plan(
    request: PlacementRequest, topology: Topology
) -> Placement | SpanningPlacement | Rejection:
    """One clique, or several: see the module's docstring."""
    if request.spread == 1:
        return place(request, topology)
    if request.spread:
        return place_across(request, topology)
    candidates, problem = _candidates(request, topology)
    if problem:
        return Rejection((problem,))
    if request.constraint == "clique" or len(candidates) == 1:
        return place(request, topology)  # nothing to span: one clique's words
    if request.num_nodes <= max(c.size for c in candidates):
        return _one_clique(request, topology)
    return place_across(request, topology)


def place_across(request: PlacementRequest, topology: Topology) -> SpanningPlacement | Rejection:
    """The domain over several cliques (`cliques`/`racks` asked, or the fewest that hold it)."""
    candidates, problem = _candidates(request, topology)
    if problem:
        return Rejection((problem,))
    if request.constraint == "clique":
        return Rejection(
            (f"a domain kept to clique {request.target!r} cannot span {request.spread} cliques",)
        )
    if request.racks and request.cliques:
        return Rejection(("ask for a number of racks or of cliques, not both",))
    pools = [(i, c, free) for i, c in enumerate(candidates) if (free := c.trays_for(request))]
    if request.spread:
        return _even(request, pools)
    return _fewest(request, candidates, pools)


def _one_clique(request: PlacementRequest, topology: Topology) -> Placement | Rejection:
    """`place()`; when nothing fits one clique now, its reasons say what spanning would do."""
    result = place(request, topology)
    if isinstance(result, Placement) or request.constraint == "clique":
        return result
    across = place_across(request, topology)
    reasons = [r for r in result.reasons if CANNOT_SPAN not in r]
    if isinstance(across, SpanningPlacement):
        count = len(across.parts)
        reasons.append(
            f"spanning {count} cliques it would fit now (ask for {count} cliques or racks)"
        )
    return Rejection(tuple(reasons))


# --- the fewest cliques ----------------------------------------------------------------------


def _fewest(
    request: PlacementRequest, candidates: Sequence[CliqueView], pools: list[Pool]
) -> SpanningPlacement | Rejection:
    n = request.num_nodes
    counts = sorted((len(free) for _, _, free in pools), reverse=True)
    k = _fewest_count(counts, n)
    if k is None:
        return Rejection(_short(request, candidates, pools))
    chosen = _pick(pools, _least_sum(counts, k, n))
    leftover = sum(len(free) for _, _, free in chosen) - n
    split = _split_clique(chosen, leftover)
    parts, lines = [], []
    for order, clique, free in sorted(chosen, key=lambda p: p[0]):
        take = len(free) - leftover if order == split else len(free)
        trays = _tightest_trays(free, take) if take < len(free) else free
        parts.append(_part(clique, trays, len(free)))
        lines.append(_why_whole(clique, take, len(free)))
    biggest = max(c.size for c in candidates)
    scope = "the largest clique" if request.constraint == "any" else "the largest allowed"
    head = (
        f"{n} trays span {k} cliques, the fewest that hold them ({scope} has {biggest} trays)"
        if n > biggest
        else f"{n} trays span {k} cliques, the fewest with {n} free trays between them"
    )
    return SpanningPlacement(tuple(parts), (head, *lines))


def _fewest_count(counts: list[int], n: int) -> int | None:
    """The fewest cliques whose free trays add up to `n` (largest first), or None."""
    total = 0
    for k, count in enumerate(counts, start=1):
        total += count
        if total >= n:
            return k
    return None


def _least_sum(counts: list[int], k: int, n: int) -> Counter[int]:
    """The free counts of `k` cliques adding up to at least `n` with the least left over;
    on a tie, the one whose largest clique is smallest (whole cliques stay whole).

    Sums reachable with c cliques are bits of one integer per c (a knapsack over the
    distinct counts, each at most k times): a few hundred big-integer shifts at any scale.
    """
    per_value = Counter(counts)
    items = sorted(v for v, m in per_value.items() for _ in range(min(m, k)))
    reach = [1] + [0] * k  # reach[c]: bit s set when c items can add up to s
    history = []
    for value in items:
        history.append(reach[:])
        for c in range(min(k, len(history)), 0, -1):
            reach[c] |= reach[c - 1] << value
    above = reach[k] >> n
    total = n + (above & -above).bit_length() - 1
    taken: Counter[int] = Counter()
    c = k
    for value, before in zip(reversed(items), reversed(history), strict=True):
        if c and not (before[c] >> total) & 1:  # not without it: take it
            taken[value] += 1
            c, total = c - 1, total - value
    return taken


def _pick(pools: list[Pool], counts: Counter[int]) -> list[Pool]:
    """Cliques with the chosen free counts, the first in topology order for each."""
    wanted = Counter(counts)
    chosen = []
    for pool in pools:
        if wanted[len(pool[2])] > 0:
            wanted[len(pool[2])] -= 1
            chosen.append(pool)
    return chosen


def _split_clique(chosen: list[Pool], leftover: int) -> int | None:
    """The clique that gives only part of its free trays (the tightest that can leave
    `leftover` free and still give one; on a tie the last, so whole cliques come first),
    by its topology order; None when none needs to."""
    if not leftover:
        return None
    order, _, _ = min((p for p in chosen if len(p[2]) > leftover), key=lambda p: (len(p[2]), -p[0]))
    return order


def _why_whole(clique: CliqueView, take: int, free: int) -> str:
    if take == clique.size:
        return f"{where(clique)}: {take} trays, the whole clique"
    if take == free:
        return f"{where(clique)}: {take} trays, all it has free ({clique.size} in all)"
    return f"{where(clique)}: {take} of its {free} free trays, the rest of the domain"


def _short(
    request: PlacementRequest, candidates: Sequence[CliqueView], pools: list[Pool]
) -> tuple[str, ...]:
    total = sum(len(free) for _, _, free in pools)
    allowed = "cliques" if request.constraint == "any" else "cliques allowed"
    most = sorted(pools, key=lambda p: (-len(p[2]), p[0]))[:4]
    named = ", ".join(f"{c.name} {len(free)}" for _, c, free in most)
    reasons = [
        f"needs {request.num_nodes} free trays; the {len(candidates)} {allowed} have "
        f"{total} free between them"
    ]
    if named:
        reasons.append(f"most free: {named}{', …' if len(pools) > len(most) else ''}")
    return tuple(reasons)


# --- an even share over N cliques or racks ---------------------------------------------------


def _even(request: PlacementRequest, pools: list[Pool]) -> SpanningPlacement | Rejection:
    n, count = request.num_nodes, request.spread
    unit = "rack" if request.racks else "clique"
    share, extra = divmod(n, count)
    if not share:
        return Rejection((f"{n} trays cannot span {count} {unit}s: each needs at least one",))
    groups: dict[str, list[Pool]] = {}  # a rack's cliques (racks asked), else each clique
    for pool in pools:
        key = (pool[1].rack or f"#{pool[1].clique_id}") if request.racks else f"#{pool[0]}"
        groups.setdefault(key, []).append(pool)
    chosen: dict[str, tuple[Pool, int]] = {}
    # The larger shares first: a group that holds one holds a smaller one too, so this
    # finds N groups whenever there are N.
    for size, wanted in ((share + 1, extra), (share, count - extra)):
        fits = [
            (b, key) for key, g in groups.items() if key not in chosen and (b := _best(g, size))
        ]
        fits.sort(key=lambda f: (len(f[0][2]), f[0][0]))
        if len(fits) < wanted:
            return Rejection((_uneven(request, unit, share, extra, groups),))
        chosen.update((key, (pool, size)) for pool, key in fits[:wanted])
    parts, lines = [], []
    for (_, clique, free), size in sorted(chosen.values(), key=lambda c: c[0][0]):
        parts.append(_part(clique, _tightest_trays(free, size), len(free)))
        lines.append(f"{where(clique)}: {size} of its {len(free)} free trays")
    each = f"{share + 1} or {share}" if extra else str(share)
    head = (
        f"{n} trays over {count} {unit}s as asked, {each} in each, from the cliques with "
        "the fewest free trays that hold them"
    )
    return SpanningPlacement(tuple(parts), (head, *lines))


def _best(group: list[Pool], size: int) -> Pool | None:
    """The clique of a group with the fewest free trays that holds `size` (first on ties)."""
    holding = (p for p in group if len(p[2]) >= size)
    return min(holding, key=lambda p: (len(p[2]), p[0]), default=None)


def _uneven(
    request: PlacementRequest, unit: str, share: int, extra: int, groups: dict[str, list[Pool]]
) -> str:
    """'needs 4 racks with 18 free trays each; 3 racks have a clique with 18 free'."""
    need = (
        f"{share + 1} free trays in {extra} and {share} in the rest"
        if extra
        else (f"{share} free trays each")
    )
    have = sum(1 for g in groups.values() if _best(g, share))
    verb = "has" if have == 1 else "have"
    found = f"a clique with {share} free" if request.racks else f"{share} free"
    units = unit if have == 1 else f"{unit}s"
    return f"needs {request.spread} {unit}s with {need}; {have} {units} {verb} {found}"


def _part(clique: CliqueView, trays: Sequence[Tray], free_before: int) -> Placement:
    return Placement(
        clique_id=clique.clique_id,
        clique_label=clique.label,
        clique_name=clique.name,
        rack=clique.rack,
        trays=tuple(trays),
        free_before=free_before,
    )
