"""The desired-state document an agent fetches: what its tray should look like now.

Built from the lifecycle's rows (DomainMember, ChannelAllocation) through its selectors, so
it is a pure read: fetching it twice changes nothing. The peer list is the domain's members
in index order, identical on every member (line i of every nodes file is member i).
Its shape is the contract's `DesiredState` (nodeagent/protocol.py, a stdlib-only module the
agent owns), and the agent checks every document against that contract's JSON Schema.
"""

from __future__ import annotations

from django.conf import settings

from domains.computedomains.models import AllocationMode, ComputeDomain
from domains.computedomains.selectors import (
    desired_member,
    domain_channels,
    domain_peer_addresses,
    member_should_run,
    peers_settling,
)
from domains.inventory.models import Node
from nodeagent.protocol import ChannelSpec, DesiredDomain, DesiredState


def desired_state_for(node: Node) -> DesiredState:
    """`{"node", "domain": {...} | None, "release": {...} | None}`.

    `domain` set: run IMEX for it. `release` set: the tray still holds that domain and must
    tear it down and report clean. Both None: the tray should be clean and idle.
    """
    doc: DesiredState = {
        "node": {"id": node.pk, "hostname": node.hostname},
        "domain": None,
        "release": None,
    }
    member = desired_member(node)
    if member is None:
        return doc
    domain = member.domain
    if not member_should_run(member):
        doc["release"] = {"uid": str(domain.uid), "request_id": domain.request_id}
        return doc
    want: DesiredDomain = {
        "uid": str(domain.uid),
        "name": f"{domain.namespace.name}/{domain.name}",
        "generation": domain.generation,
        "request_id": domain.request_id,
        "index": member.index,
        "peers": [
            {"index": index, "ip": ip, "hostname": hostname}
            for index, ip, hostname in domain_peer_addresses(domain)
        ],
        "imex": {
            "server_port": settings.PORTAL["IMEX_SERVER_PORT"],
            "cmd_port": settings.PORTAL["IMEX_CMD_PORT"],
        },
        "channels": channel_spec(domain, domain_channels(domain)),
    }
    if domain.follows_workload:
        # Membership changes without restarts: the nodes file lists a stable name per slot
        # (as many as the clique has trays, identical on every member), the agents map the
        # members' names to their IPs and tell the daemon to re-resolve them.
        want["slots"] = max(
            Node.objects.filter(clique_id=member.clique_id).count(), member.index + 1
        )
        if peers_settling(domain.pk):
            want["settling"] = True
    doc["domain"] = want
    return doc


def channel_spec(domain: ComputeDomain, numbers: list[int]) -> ChannelSpec:
    """Compact: `All` sends the range, not 2,047 numbers."""
    if domain.allocation_mode == AllocationMode.ALL and numbers:
        return {"mode": "All", "first": min(numbers), "last": max(numbers)}
    return {"mode": "Single", "numbers": sorted(numbers)}
