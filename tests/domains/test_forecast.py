"""The queue simulated forward with `place()`: when each waiting request would be placed,
and an honest "no estimate" when no time can be given."""

from __future__ import annotations

import math
from dataclasses import replace

from domains.placement.forecast import (
    ESTIMATED,
    NEVER_FITS,
    NO_LEASE_ENDS,
    NOW,
    Holding,
    Waiting,
    forecast,
)
from domains.placement.model import PlacementRequest, Topology, TrayStatus
from domains.placement.simulation import synthetic_topology


def held(topology: Topology, node_ids: set[int]) -> Topology:
    return Topology(
        tuple(
            replace(c, trays=tuple(
                replace(t, status=TrayStatus.IN_USE) if t.node_id in node_ids else t
                for t in c.trays
            ))
            for c in topology.cliques
        )
    )  # fmt: skip


def wait(key: int, trays: int, hold: float = 50.0, **request) -> Waiting:
    return Waiting(key, PlacementRequest(num_nodes=trays, **request), hold)


def test_a_request_waits_for_the_lease_that_frees_enough_trays():
    fabric = held(synthetic_topology([(4,)]), {1, 2, 3, 4})
    holdings = [Holding((1, 2), 100.0), Holding((3, 4), 200.0)]
    answers = forecast(fabric, holdings, [wait(7, 3), wait(8, 1)], now=0.0)
    assert answers[7].at == 200.0 and answers[7].reason == ESTIMATED
    # The smaller one behind it backfills when the first lease ends (as the controller does).
    assert answers[8].at == 100.0


def test_those_placed_in_the_simulation_hold_their_trays_for_their_own_lease():
    fabric = held(synthetic_topology([(4,)]), {1, 2})
    answers = forecast(
        fabric, [Holding((1, 2), 300.0)], [wait(1, 2, hold=40.0), wait(2, 4)], now=0.0
    )
    assert answers[1].at == 0.0 and answers[1].reason == NOW
    assert answers[2].at == 300.0  # needs the first one's trays too: freed at 40, then 300


def test_no_estimate_when_it_can_never_fit_or_nothing_ahead_ends():
    fabric = held(synthetic_topology([(4,)]), {1, 2, 3})
    answers = forecast(fabric, [Holding((1, 2, 3), math.inf)], [wait(1, 5), wait(2, 2)], now=0.0)
    assert answers[1].at is None and answers[1].reason == NEVER_FITS
    assert "has only 4 trays" in answers[1].message
    assert answers[2].at is None and answers[2].reason == NO_LEASE_ENDS


def test_a_maintenance_window_delays_a_request_whose_lease_would_reach_into_it():
    fabric = synthetic_topology([(2,)])
    serviced = Topology(
        tuple(
            replace(c, trays=tuple(replace(t, maintenance=((100.0, 150.0),)) for t in c.trays))
            for c in fabric.cliques
        )
    )
    answers = forecast(serviced, [], [wait(1, 2, hold=80.0), wait(2, 1, hold=10.0)], now=50.0)
    assert answers[1].at == 150.0  # 50 + 80 would reach into the window: after it ends
    assert answers[2].at == 50.0  # 50 + 10 ends before the window starts
