"""Work queued once per burst of changes: a mark in the shared cache (Redis) says the work
for an object is queued already, so the changes behind the first queue nothing more.

The queued work clears the mark before it reads, so a change that lands while it runs
queues the next round. A mark the work never clears (its worker killed) expires after
`pending_s`, and the next change queues again. Used for the agents' report fold
(`domains.agents`) and the ComputeDomain object's publish (`domains.kube`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from django.core.cache import cache


@dataclass(frozen=True)
class Burst:
    """The pending marks of one kind of queued work (`name`), each living `pending_s`."""

    name: str
    pending_s: float

    def key(self, object_id: int) -> str:
        """The cache key that says "the work for this object is queued"."""
        return f"{self.name}:{object_id}"

    def mark(self, object_id: int) -> bool:
        """Mark the work for the object queued: True when it was not (the caller queues
        it). Raises what the cache raises when it is away; the caller decides."""
        return bool(cache.add(self.key(object_id), 1, self.pending_s))

    def clear(self, object_id: int) -> None:
        """The work has started: a change from now on queues the next round. The cache
        away: the mark expires by itself."""
        with contextlib.suppress(Exception):
            cache.delete(self.key(object_id))
