"""What the business announces, and who listens.

Services send these through `domains.audit.announce`, which defers each send until the
surrounding transaction commits, so nobody hears of a change that rolled back (the one
exception, `node_marked_down`, says so below). Listeners: `portal.realtime` turns the
first four (and new in-app notifications) into websocket messages; `domains.kube`
publishes changed domains; `domains.computedomains` queues placement and lets go of trays
marked down; `domains.notifications` turns recorded events into notifications. Everything a
listener needs is in the keyword arguments; `sender` is the model class of the one object
a change is about, or None.
"""

from __future__ import annotations

from django.dispatch import Signal

# kwargs: domain_uid (str), namespace_id (int), phase (str)
domain_changed = Signal()
# kwargs: node_ids (list[int])
node_changed = Signal()
# kwargs: node_ids (list[int]) whose agents must re-fetch their desired state
desired_state_changed = Signal()
# kwargs: event_id (int), namespace_id (int | None), domain_uid (str | None), verb (str)
event_recorded = Signal()
# kwargs: domain_id (int) whose members' agents reported changes, recorded on the trays and
# waiting to be folded into the members and the phase
member_reports_pending = Signal()
# kwargs: domain_id (int) of a domain admitted and waiting to be placed
placement_wanted = Signal()
# kwargs: domain_id (int) whose membership changed (a domain that follows its workload): its
# members' agents must re-fetch their peer list, soon but not for every single join
peers_changed = Signal()
# no kwargs: trays or channels came free, so queued domains may fit now
capacity_freed = Signal()
# kwargs: notification_id (int), channel (str), user_id (int): a notification was written
# (in-app ones are delivered by that; e-mail and webhooks still have to be sent)
notification_created = Signal()

# Sent INSIDE the transaction that marks a tray down (not after commit), so what listeners
# change is part of it. kwargs: node_id (int), message (str, why)
node_marked_down = Signal()
