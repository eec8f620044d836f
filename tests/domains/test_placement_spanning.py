"""Placement over several cliques: the fewest cliques, whole ones first, even shares when a
count is asked, and the reasons the preview shows."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from domains.placement.algorithm import place
from domains.placement.model import (
    Placement,
    PlacementRequest,
    Rejection,
    SpanningPlacement,
    Topology,
    TrayStatus,
)
from domains.placement.simulation import fabric_of, synthetic_topology
from domains.placement.spanning import place_across, plan

# Four whole racks and one split in two 9-tray cliques.
FABRIC = ((18,), (18,), (18,), (18,), (9, 9))


def busy(topology: Topology, rack: int, *slots: int, status: str = TrayStatus.IN_USE) -> Topology:
    names = {f"r{rack:03d}-t{s:02d}" for s in slots}
    return Topology(
        tuple(
            replace(
                c,
                trays=tuple(
                    replace(t, status=status) if t.hostname in names else t for t in c.trays
                ),
            )
            for c in topology.cliques
        )
    )


def spanning(result: Placement | SpanningPlacement | Rejection) -> SpanningPlacement:
    assert isinstance(result, SpanningPlacement), result
    return result


def shares(result: SpanningPlacement) -> list[tuple[str, int]]:
    return [(part.clique_name, len(part.trays)) for part in result.parts]


def test_a_request_larger_than_any_clique_spans_the_fewest_cliques():
    result = spanning(plan(PlacementRequest(72), synthetic_topology(FABRIC)))
    assert shares(result) == [("r001-c0", 18), ("r002-c0", 18), ("r003-c0", 18), ("r004-c0", 18)]
    assert result.racks == ["r001", "r002", "r003", "r004"]
    assert result.describe() == "72 trays in 4 cliques over 4 racks"
    assert result.reasons[0] == (
        "72 trays span 4 cliques, the fewest that hold them (the largest clique has 18 trays)"
    )
    assert result.reasons[1] == "rack r001 clique r001-c0: 18 trays, the whole clique"


def test_whole_cliques_come_first_and_one_clique_gives_the_rest():
    result = spanning(plan(PlacementRequest(19), synthetic_topology(FABRIC)))
    # 18 + 9 leaves the fewest trays over (8) of any two cliques: the small clique is split.
    assert shares(result) == [("r001-c0", 18), ("r005-c0", 1)]
    assert (
        result.reasons[2]
        == "rack r005 clique r005-c0: 1 of its 9 free trays, the rest of the domain"
    )


def test_it_fills_the_holes_and_keeps_whole_cliques_free():
    topology = busy(synthetic_topology(FABRIC), 3, *range(1, 7))  # r003: 12 free
    result = spanning(plan(PlacementRequest(21), topology))
    assert shares(result) == [("r003-c0", 12), ("r005-c0", 9)]  # exactly 21: nothing left over
    assert result.reasons[1] == "rack r003 clique r003-c0: 12 trays, all it has free (18 in all)"
    topology = busy(topology, 4, *range(1, 7))  # r004: 12 free too
    # 12 + 12 leaves 4 over, as 18 + 9 (after 18 + 12 was 10): the smaller cliques go first.
    assert shares(spanning(plan(PlacementRequest(20), topology)))[0] == ("r003-c0", 12)


def test_the_split_clique_gives_its_tightest_run_of_free_slots():
    topology = busy(synthetic_topology([(18,), (18,)]), 2, 4, 13)  # r002: runs 3, 8, 5
    result = spanning(plan(PlacementRequest(21), topology))
    assert shares(result) == [("r001-c0", 18), ("r002-c0", 3)]
    assert [t.slot for t in result.parts[1].trays] == [1, 2, 3]


def test_a_request_that_fits_one_clique_stays_in_one():
    topology = synthetic_topology(FABRIC)
    for n in (1, 9, 18):
        assert plan(PlacementRequest(n), topology) == place(PlacementRequest(n), topology)
    assert plan(PlacementRequest(18, cliques=1), topology) == place(PlacementRequest(18), topology)


def test_one_clique_full_now_says_what_spanning_would_do():
    topology = busy(synthetic_topology([(18,), (18,)]), 1, *range(1, 10))
    topology = busy(topology, 2, *range(1, 10))
    result = plan(PlacementRequest(18), topology)
    assert isinstance(result, Rejection)
    assert result.message == (
        "needs 18 free trays in one clique; best is rack r001 clique r001-c0 with 9 free"
    )
    assert not any("cannot span" in r for r in result.reasons)
    assert result.reasons[-1] == "spanning 2 cliques it would fit now (ask for 2 cliques or racks)"


def test_a_count_asked_shares_the_trays_evenly():
    topology = synthetic_topology(FABRIC)
    result = spanning(plan(PlacementRequest(27, cliques=2), topology))
    # The two 9-tray cliques cannot hold 14 + 13: two whole racks do.
    assert shares(result) == [("r001-c0", 14), ("r002-c0", 13)]
    assert result.reasons[0] == (
        "27 trays over 2 cliques as asked, 14 or 13 in each, from the cliques with the "
        "fewest free trays that hold them"
    )
    assert shares(spanning(plan(PlacementRequest(18, cliques=2), topology))) == [
        ("r005-c0", 9),
        ("r005-c1", 9),
    ]


def test_racks_asked_means_one_clique_in_each_rack():
    topology = synthetic_topology(FABRIC)
    result = spanning(plan(PlacementRequest(18, racks=2), topology))
    assert shares(result) == [("r001-c0", 9), ("r005-c0", 9)]  # not both of r005's cliques
    assert result.racks == ["r001", "r005"]
    result = spanning(plan(PlacementRequest(72, racks=4), topology))
    assert result.racks == ["r001", "r002", "r003", "r004"]
    refused = plan(PlacementRequest(90, racks=5), topology)
    assert isinstance(refused, Rejection)
    assert (
        refused.message
        == "needs 5 racks with 18 free trays each; 4 racks have a clique with 18 free"
    )


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (PlacementRequest(100), "needs 100 free trays; the 6 cliques have 90 free between them"),
        (PlacementRequest(3, cliques=4), "3 trays cannot span 4 cliques: each needs at least one"),
        (
            PlacementRequest(18, cliques=2, constraint="clique", target="r001-c0"),
            "a domain kept to clique 'r001-c0' cannot span 2 cliques",
        ),
        (
            PlacementRequest(18, cliques=2, racks=2),
            "ask for a number of racks or of cliques, not both",
        ),
        (
            PlacementRequest(20, constraint="rack", target="r009"),
            "no rack named 'r009' with an NVLink clique",
        ),
    ],
)
def test_what_cannot_be_spanned_is_a_reason(request_, message):
    result = plan(request_, synthetic_topology(FABRIC))
    assert isinstance(result, Rejection)
    assert result.message == message


def test_a_rack_constraint_spans_that_racks_cliques_only():
    result = spanning(
        plan(PlacementRequest(12, constraint="rack", target="r005"), synthetic_topology(FABRIC))
    )
    assert shares(result) == [("r005-c0", 9), ("r005-c1", 3)]


def test_it_takes_only_trays_that_fit_the_request():
    topology = busy(synthetic_topology(FABRIC), 1, 1, 2, status=TrayStatus.CORDONED)
    topology = busy(topology, 2, 5, status=TrayStatus.DOWN)
    result = spanning(plan(PlacementRequest(40, gpus_per_node=4), topology))
    assert all(t.status == TrayStatus.FREE for t in result.trays)
    assert len(set(result.node_ids)) == 40
    assert isinstance(plan(PlacementRequest(40, gpus_per_node=8), topology), Rejection)
    windowed = replace(
        topology.cliques[2],
        trays=tuple(replace(t, maintenance=((100.0, 200.0),)) for t in topology.cliques[2].trays),
    )
    held = Topology((*topology.cliques[:2], windowed, *topology.cliques[3:]))
    result = spanning(plan(PlacementRequest(40, at=150.0, until=300.0), held))
    assert "r003-c0" not in [p.clique_name for p in result.parts]


def test_spanning_is_deterministic():
    topology = busy(fabric_of(360), 3, 2, 5, 7)
    assert len({place_across(PlacementRequest(50), topology) for _ in range(5)}) == 1
    assert len({place_across(PlacementRequest(50, racks=3), topology) for _ in range(5)}) == 1


@pytest.mark.parametrize("seed", range(40))
def test_it_leaves_the_fewest_trays_over_of_any_fewest_cliques(seed):
    """Against every set of cliques, on small random fabrics."""
    rng = random.Random(seed)
    topology = synthetic_topology([rng.choice([(18,), (9, 9), (6, 6, 6)]) for _ in range(5)])
    for clique in topology.cliques:
        rack = int(clique.rack[1:])
        topology = busy(topology, rack, *rng.sample(range(1, 19), rng.randrange(0, 9)))
    free = [len(c.free_trays()) for c in topology.cliques]
    n = rng.randrange(max(free) + 1, sum(free) + 2)
    result = place_across(PlacementRequest(n), topology)
    best = None
    for k in range(1, len(free) + 1):
        sums = [sum(s) for s in itertools.combinations(free, k) if sum(s) >= n]
        if sums:
            best = (k, min(sums) - n)
            break
    if best is None:
        assert isinstance(result, Rejection)
        return
    result = spanning(result)
    taken = sum(len(p.trays) for p in result.parts)
    over = sum(p.free_before for p in result.parts) - n
    assert (taken, (len(result.parts), over)) == (n, best)
    assert sum(len(p.trays) < p.free_before for p in result.parts) <= 1  # one split at most
