"""The desired-state document an agent fetches: what its tray should look like now.

Built from the lifecycle's rows (DomainMember, ChannelAllocation) in one read: fetching it
twice changes nothing. The peer list is the domain's members **of the tray's own NVLink
clique** in index order, identical on every member of that clique (line i of every nodes
file of the clique is its member i): a domain over several cliques runs one IMEX ensemble
in each, as NVIDIA's driver does, and no nodes file ever lists a tray of another clique.
Its shape is the contract's `DesiredState` (agentwire/messages.py, which both sides
import), and the agent checks every document against that contract's JSON Schema.

Every member of a domain fetches it after every nudge (placement, release) and on its poll:
18 fetches at once for a rack. Through the ORM that was four queries and ~4 ms of the web's
CPU per fetch, most of it building the queries; `_DESIRED_SQL` is one statement (~0.5 ms),
which on the agents' fast path also checks the node token, so a fetch is one round trip.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings
from django.db import connection

from agentwire.messages import ChannelSpec, DesiredDomain, DesiredState
from domains.computedomains.models import AllocationMode, ComputeDomain, DomainMember
from domains.computedomains.models import ChannelAllocation as Channel
from domains.computedomains.selectors import RUNNING_PHASES, peers_settling
from domains.inventory.models import Clique, MaintenanceWindow, Node, NodeCondition, NodeState
from domains.security import hash_token
from domains.sqlnames import column, statement
from domains.tenancy.models import Namespace


def desired_state_for(node: Node) -> DesiredState:
    """`{"node", "domain": {...} | None, "release": {...} | None}` for a tray whose agent
    is already authenticated (the Django view).

    `domain` set: run IMEX for it. `release` set: the tray still holds that domain and must
    tear it down and report clean. Both None: the tray should be clean and idle.
    """
    doc = desired_state(node.pk)
    if doc is None:  # the row went away meanwhile: nothing to hold
        return {"node": {"id": node.pk, "hostname": node.hostname}, "domain": None, "release": None}
    return doc


def desired_state(node_id: int, *, token: str | None = None) -> DesiredState | None:
    """The tray's desired state, read in one statement; None when there is no such tray or,
    with `token`, when it is not that tray's node token (or the tray is gone): the caller
    then lets the authenticating path answer, as it would for any refused token."""
    params: list[Any] = [NodeState.READY, *RUNNING_PHASES, *RUNNING_PHASES, node_id]
    if token is not None:
        params.append(hash_token(token))
    with connection.cursor() as cursor:
        cursor.execute(_desired_sql(token is not None), params)
        row = cursor.fetchone()
    if row is None:
        return None
    (node_pk, hostname, eligible, index, clique_id, domain_id, uid, name, namespace, generation,
     request_id, phase, mode, num_nodes, name_token, peers, channels, slots) = row  # fmt: skip
    doc: DesiredState = {
        "node": {"id": node_pk, "hostname": hostname},
        "domain": None,
        "release": None,
        "eligible": bool(eligible),
    }
    if uid is None:
        return doc
    if phase not in RUNNING_PHASES:
        doc["release"] = {"uid": str(uid), "request_id": request_id}
        return doc
    if isinstance(peers, str):  # Django reads json as text
        peers = json.loads(peers)
    want: DesiredDomain = {
        "uid": str(uid),
        "name": f"{namespace}/{name}",
        "generation": generation,
        "request_id": request_id,
        "index": index,
        "peers": [{"index": i, "ip": ip, "hostname": host} for i, ip, host in peers or []],
        "imex": {
            "server_port": settings.PORTAL["IMEX_SERVER_PORT"],
            "cmd_port": settings.PORTAL["IMEX_CMD_PORT"],
        },
        "channels": _channels(mode, channels or []),
    }
    if num_nodes == 0:
        # A domain that follows its workload: membership changes without restarts. The nodes
        # file lists a fixed set of stable names carrying the domain's token (identical on
        # every member), the agents map them to the members' IPs and tell the daemon to
        # re-resolve them.
        want["slots"] = max(slots, index + 1)
        if name_token:
            want["names"] = name_token
        if peers_settling(domain_id, clique_id):  # a burst of joins in its clique (Redis)
            want["settling"] = True
    doc["domain"] = want
    return doc


def _channels(mode: str, ledger: list[int]) -> ChannelSpec:
    """`Single`: the channel the ledger holds for the domain. `All`: every channel, 0
    included, as NVIDIA's driver gives them (no ledger rows: a tray serves one domain at a
    time), sent as a range."""
    if mode == AllocationMode.ALL:
        return {"mode": "All", "first": 0, "last": settings.PORTAL["IMEX_CHANNEL_COUNT"] - 1}
    return {"mode": "Single", "numbers": sorted(ledger)}


# The tray, whether a claim may make it a new member (following.py's `join_refusal`), the
# membership that holds it (one at most: member_one_live_domain_per_node) and
# its domain; while the domain runs, its peers (the active members of the tray's clique in
# index order, with their trays' hostnames), the clique's open channels and, for a domain
# that follows its workload, how many trays its clique has. Column and table names come
# from the models (`statement`).
_DESIRED_SQL = """
SELECT n.{node.id}, n.{node.hostname},
       n.{node.state} = %s AND NOT n.{node.gone} AND n.{node.clique} IS NOT NULL
           AND n.{node.management_ip} IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM {condition} k
                           WHERE k.{condition.node} = n.{node.id} AND k.{condition.blocking})
           AND NOT EXISTS (SELECT 1 FROM {clique} q
                           WHERE q.{clique.id} = n.{node.clique}
                             AND q.{clique.rack} <> n.{node.rack})
           AND NOT EXISTS (SELECT 1 FROM {member} h
                           WHERE h.{member.node} = n.{node.id} AND h.{member.active})
           AND NOT EXISTS (SELECT 1 FROM {window_tray} wt
                           JOIN {window} w ON w.{window.id} = wt.{window_tray.maintenancewindow}
                           WHERE wt.{window_tray.node} = n.{node.id}
                             AND w.{window.cancelled_at} IS NULL AND w.{window.ends_at} > now()),
       m.{member.index}, m.{member.clique}, d.{domain.id}, d.{domain.uid},
       d.{domain.name}, ns.{namespace.name}, d.{domain.generation}, d.{domain.request_id},
       d.{domain.phase}, d.{domain.allocation_mode}, d.{domain.num_nodes},
       d.{domain.imex_name_token},
       CASE WHEN d.{domain.phase} IN ({running}) THEN (
           SELECT json_agg(json_build_array(p.{member.index}, p.{member.ip_address},
                                            pn.{node.hostname})
                           ORDER BY p.{member.index})
           FROM {member} p JOIN {node} pn ON pn.{node.id} = p.{member.node}
           WHERE p.{member.domain} = d.{domain.id} AND p.{member.active}
             AND p.{member.clique} = m.{member.clique}) END,
       CASE WHEN d.{domain.phase} IN ({running}) THEN (
           SELECT array_agg(c.{channel.channel} ORDER BY c.{channel.channel}) FROM {channel} c
           WHERE c.{channel.domain} = d.{domain.id} AND c.{channel.clique} = m.{member.clique}
             AND c.{channel.released_at} IS NULL) END,
       CASE WHEN d.{domain.num_nodes} = 0 THEN (
           SELECT count(*) FROM {node} s WHERE s.{node.clique} = m.{member.clique}) END
FROM {node} n
LEFT JOIN {member} m ON m.{member.node} = n.{node.id} AND m.{member.active}
LEFT JOIN {domain} d ON d.{domain.id} = m.{member.domain}
LEFT JOIN {namespace} ns ON ns.{namespace.id} = d.{domain.namespace}
WHERE n.{node.id} = %s{auth}
LIMIT 1
"""


@functools.cache
def _desired_sql(with_token: bool) -> str:
    """_DESIRED_SQL with the models' table and column names, quoted; values stay %s."""
    auth = f" AND n.{column(Node, 'agent_token_hash')} = %s AND NOT n.{column(Node, 'gone')}"
    return statement(
        _DESIRED_SQL,
        node=Node,
        member=DomainMember,
        domain=ComputeDomain,
        namespace=Namespace,
        channel=Channel,
        condition=NodeCondition,
        clique=Clique,
        window=MaintenanceWindow,
        window_tray=MaintenanceWindow.nodes.through,
        running=", ".join(["%s"] * len(RUNNING_PHASES)),
        auth=auth if with_token else "",
    )
