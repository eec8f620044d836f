"""Placement as a pure function: best fit, contiguity, constraints, reasons, fragmentation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from domains.placement.algorithm import clique_summaries, place, place_first_fit
from domains.placement.model import Placement, PlacementRequest, Rejection, Topology, TrayStatus
from domains.placement.simulation import fabric_of, random_trace, run_trace, synthetic_topology


def with_status(topology: Topology, statuses: dict[str, str]) -> Topology:
    """The topology with some trays (by hostname) in another status."""
    return Topology(
        tuple(
            replace(
                c,
                trays=tuple(replace(t, status=statuses.get(t.hostname, t.status)) for t in c.trays),
            )
            for c in topology.cliques
        )
    )


def busy(topology: Topology, rack: int, *slots: int, status: str = TrayStatus.IN_USE) -> Topology:
    return with_status(topology, {f"r{rack:03d}-t{s:02d}": status for s in slots})


def slots(result: Placement | Rejection) -> list[int]:
    assert isinstance(result, Placement), result
    return [t.slot for t in result.trays]


def test_it_prefers_the_clique_with_the_fewest_free_trays_that_fits():
    topology = busy(synthetic_topology([(18,), (18,), (9, 9)]), 2, *range(1, 13))
    result = place(PlacementRequest(num_nodes=5), topology)
    assert isinstance(result, Placement)
    assert result.clique_name == "r002-c0"  # 6 free beats 9 and 18
    assert slots(result) == [13, 14, 15, 16, 17]


def test_a_whole_rack_request_still_fits_after_small_ones():
    topology = synthetic_topology([(18,), (18,)])
    for _ in range(6):
        result = place(PlacementRequest(num_nodes=3), topology)
        topology = with_status(topology, {h: TrayStatus.IN_USE for h in result.hostnames})
    assert isinstance(place(PlacementRequest(num_nodes=18), topology), Placement)
    # First fit spreads nothing here either, but best fit never touched the second rack:
    assert {s.name: s.free for s in clique_summaries(topology)} == {"r001-c0": 0, "r002-c0": 18}


def test_it_takes_the_tightest_run_of_free_slots_to_keep_the_largest_block():
    # Free runs in rack 1: slots 1-3 (3), 5-12 (8), 14-18 (5).
    topology = busy(synthetic_topology([(18,)]), 1, 4, 13)
    assert slots(place(PlacementRequest(num_nodes=3), topology)) == [1, 2, 3]
    assert slots(place(PlacementRequest(num_nodes=4), topology)) == [14, 15, 16, 17]
    assert slots(place(PlacementRequest(num_nodes=8), topology)) == list(range(5, 13))


def test_without_a_run_long_enough_it_uses_up_small_holes_first():
    # Free runs: 1-2 (2), 4-8 (5), 10-18 (9). Ten trays: holes of 2 and 5 first, then 3.
    topology = busy(synthetic_topology([(18,)]), 1, 3, 9)
    result = slots(place(PlacementRequest(num_nodes=10), topology))
    assert result == [1, 2, 4, 5, 6, 7, 8, 10, 11, 12]


def test_it_uses_only_ready_free_trays_of_one_clique():
    topology = busy(synthetic_topology([(9, 9)]), 1, 1, 2, status=TrayStatus.CORDONED)
    topology = busy(topology, 1, 10, status=TrayStatus.STALE)
    result = place(PlacementRequest(num_nodes=8), topology)
    assert isinstance(result, Placement)
    assert len({t.hostname for t in result.trays}) == 8
    assert all(t.status == TrayStatus.FREE for t in result.trays)
    assert result.clique_name in {"r001-c0", "r001-c1"}
    assert isinstance(place(PlacementRequest(num_nodes=9), topology), Rejection)


def test_it_names_the_best_candidate_and_what_is_missing():
    topology = busy(synthetic_topology([(18,), (9, 9)]), 1, *range(1, 10))
    topology = busy(topology, 1, 10, 11, status=TrayStatus.CORDONED)
    result = place(PlacementRequest(num_nodes=10), topology)
    assert isinstance(result, Rejection)
    assert result.message == (
        "needs 10 free trays in one clique; best is rack r002 clique r002-c0 with 9 free"
    )
    detail = place(PlacementRequest(num_nodes=10, constraint="rack", target="r001"), topology)
    assert isinstance(detail, Rejection)
    assert detail.reasons == (
        "needs 10 free trays in one clique; best is rack r001 clique r001-c0 with 7 free",
        "r001-c0: 7 free, 9 in use, 2 cordoned (r001-t10, r001-t11)",
    )


def test_a_request_larger_than_any_clique_says_so():
    result = place(PlacementRequest(num_nodes=19), synthetic_topology([(18,), (9, 9)]))
    assert isinstance(result, Rejection)
    assert result.message == (
        "needs 19 trays in one clique; the largest clique (rack r001 clique r001-c0) "
        "has only 18 trays"
    )


@pytest.mark.parametrize(
    ("constraint", "target", "expected"),
    [
        ("rack", "r002", "r002-c0"),
        ("clique", "r003-c1", "r003-c1"),
        ("clique", "uuid-3.1", "r003-c1"),
    ],
)
def test_it_honours_the_placement_constraint(constraint, target, expected):
    topology = synthetic_topology([(18,), (18,), (9, 9)])
    result = place(PlacementRequest(2, constraint=constraint, target=target), topology)
    assert isinstance(result, Placement)
    assert result.clique_name == expected


def test_an_unknown_constraint_target_is_a_reason_not_a_crash():
    topology = synthetic_topology([(18,)])
    assert place(PlacementRequest(2, constraint="rack", target="nope"), topology).reasons == (
        "no rack named 'nope' with an NVLink clique",
    )
    assert place(PlacementRequest(2, constraint="clique", target="x.1"), topology).reasons == (
        "no clique named 'x.1'",
    )


def test_trays_with_too_few_gpus_are_skipped():
    topology = synthetic_topology([(18,)], gpus=4)
    assert isinstance(place(PlacementRequest(2, gpus_per_node=4), topology), Placement)
    result = place(PlacementRequest(2, gpus_per_node=8), topology)
    assert isinstance(result, Rejection)
    assert "18 with fewer than 8 GPUs" in result.reasons[1]


def test_placement_is_deterministic():
    topology = busy(fabric_of(360), 3, 2, 5, 7)
    results = {place(PlacementRequest(num_nodes=7), topology) for _ in range(5)}
    assert len(results) == 1


def test_summaries_report_free_blocks_and_stranded_trays():
    topology = busy(synthetic_topology([(18,), (9, 9)]), 1, 4, 13)
    topology = busy(topology, 1, 1, status=TrayStatus.DOWN)
    topology = busy(topology, 2, *range(1, 8))  # clique r002-c0: 2 free
    first, second, third = clique_summaries(topology, smallest_request=3)
    assert (first.free, first.in_use, first.unavailable) == (15, 2, 1)
    assert (first.largest_free_block, first.fragmented, first.stranded) == (8, 7, 0)
    assert (second.free, second.stranded) == (2, 2)  # below the smallest request of 3
    assert (third.free, third.largest_free_block, third.stranded) == (9, 9, 0)
    assert clique_summaries(topology)[1].stranded == 0  # smallest request 1: never stranded


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_fit_places_more_requests_than_first_fit_on_a_random_trace(seed):
    trace = random_trace(seed=seed, arrivals=1000, mean_hold=20)
    topology = fabric_of(180)
    best = run_trace(place, topology, trace)
    first = run_trace(place_first_fit, topology, trace)
    assert best.placed > first.placed
    assert best.refused_trays < first.refused_trays
