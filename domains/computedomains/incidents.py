"""What tenants are told when an operator takes a tray of their running domain out of the
pool without marking it down: a cordon or a drain leaves the domain running, but nothing
new lands on the tray and a drained tray goes to maintenance once the domain is released.
Each running domain on the tray gets a line in its own timeline (so its page and the
notifications say it), with the operator's reason, which the action's form says tenants
read."""

from __future__ import annotations

from domains.audit.events import Actor, record_event
from domains.computedomains.models import DomainMember
from domains.computedomains.selectors import RUNNING_PHASES
from domains.inventory.models import Node

# Tray action → the verb recorded on each running domain that has a member on the tray.
TENANT_VERBS = {"cordon": "domain.tray_cordoned", "drain": "domain.tray_draining"}

_WHAT_IT_MEANS = {
    "cordon": "your domain keeps running on it; nothing new lands there until it is uncordoned",
    "drain": "your domain keeps running on it until you release it; the tray then goes to "
    "maintenance, so plan to move the workload",
}


def tell_tenants(*, actor: Actor, node: Node, action: str, reason: str = "") -> int:
    """Record the change on every running domain with a member on `node`; returns how many."""
    verb = TENANT_VERBS.get(action)
    if verb is None:
        return 0
    members = DomainMember.objects.filter(
        node=node, active=True, domain__phase__in=RUNNING_PHASES
    ).select_related("domain__namespace")
    done = 0
    for member in members:
        word = "cordoned" if action == "cordon" else "being drained"
        message = f"tray {node.hostname} is {word}: {_WHAT_IT_MEANS[action]}"
        if reason:
            message += f". Operator's note: {reason}"
        record_event(
            actor=actor,
            verb=verb,
            obj=member.domain,
            node=node,
            message=message[:500],
            details={"nodes": [node.hostname], "action": action, "note": reason[:500]},
        )
        done += 1
    return done
