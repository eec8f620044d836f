"""What the business announces. `portal.realtime` turns these into websocket messages.

Services send them through `domains.computedomains.events.announce()`, which defers the send
until the surrounding transaction commits, so nobody hears of a change that rolled back.
"""

from __future__ import annotations

from django.dispatch import Signal

# kwargs: domain_uid (str), namespace_id (int), phase (str)
domain_changed = Signal()
# kwargs: node_ids (list[int])
node_changed = Signal()
# kwargs: node_ids (list[int]) whose agents must re-fetch their desired state
desired_state_changed = Signal()
# kwargs: event_id (int), namespace_id (int | None), domain_uid (str | None)
event_recorded = Signal()
