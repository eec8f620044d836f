"""Tests that count up to a rate limit's ceiling must do it inside one of its windows.

The limits count per fixed window of the clock (portal.ratelimit): a test whose hits cross
into the next window starts counting again halfway and never reaches the ceiling. Before
such a test, wait out the current window when too little of it is left.
"""

from __future__ import annotations

import time

from portal.ratelimit import RateLimit


def room_in_window(*limits: RateLimit, room_s: float = 20.0) -> None:
    """Return once every limit's current window has at least `room_s` seconds left."""
    for limit in sorted(limits, key=lambda lim: lim.window_s):
        left = limit.window_s - time.time() % limit.window_s
        if left < room_s:
            time.sleep(left + 0.1)
