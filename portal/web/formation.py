"""What the domain page shows of its members: each tray's formation timeline, the peer
matrix, the channels, its IMEX ensembles clique by clique when it spans several and, once it
ended, what the teardown took down."""

from __future__ import annotations

from datetime import datetime

from domains.computedomains.ensembles import ensembles
from domains.computedomains.models import ComputeDomain
from domains.computedomains.selectors import domain_channels

TIMELINE = (
    ("assigned", "Assigned"),
    ("configuring", "Configuring"),
    ("waiting_peers", "Waiting for peers"),
    ("ready", "Ready"),
)
# The step of TIMELINE a member in this state is at (absent: past them all, or ended).
CURRENT_STEP = {"assigned": 0, "configuring": 1, "waiting_peers": 2}


def member_timeline(member, domain: ComputeDomain) -> dict:
    """One tray's steps: (label, time reached or None, done). A step passed too quickly to
    be reported on its own (Ready came straight after Assigned) is done all the same."""
    stamps = {
        "assigned": member.assigned_at,
        "configuring": member.configuring_at,
        "waiting_peers": member.waiting_peers_at,
        "ready": member.ready_at,
    }
    # A tray that recovers goes through the steps again, and each stamp is the last time
    # it entered that step: steps beyond where it is now are not done in this round, and
    # a stamp older than the step before it is from an earlier round (done, time unknown).
    now_at = CURRENT_STEP.get(member.state, len(TIMELINE) - 1)
    steps: list[tuple[str, datetime | None, bool]] = []
    later_reached = False
    for i, (key, label) in reversed(list(enumerate(TIMELINE))):
        stamp = stamps[key] if i <= now_at else None
        reached = stamp is not None or later_reached
        later_reached = later_reached or reached
        steps.insert(0, (label, stamp, reached))
    last = None
    for i, (label, at, reached) in enumerate(steps):
        if at is not None and last is not None and at < last:
            steps[i] = (label, None, reached)
        elif at is not None:
            last = at
    if member.released_at or not domain.is_live:
        steps.append(("Released", member.released_at, member.released_at is not None))
    return {"member": member, "steps": steps}


def teardown_summary(domain: ComputeDomain, members) -> dict:
    """What the end of a domain took down, from its members' last reports and the ledger."""
    released = [m for m in members if m.released_at is not None]
    declared = [m for m in released if "declared down" in (m.message or "")]
    channels = list(domain.channels.order_by("channel").values_list("channel", flat=True))
    return {
        "trays": len(members),
        "clean": len(released) - len(declared),
        "declared_down": [m.node.hostname for m in declared],
        "channels": channels,
        "all_mode": domain.allocation_mode == "All",
    }


PEER_WORDS = {
    "CONNECTED": "C",
    "NEVER_CONNECTED": "N",
    "RECOVERING": "R",
    "DISCONNECTED": "D",
    "INVALID": "I",
    "VERSION_MISMATCH": "!V!",
    "NODE_MAP_MISMATCH": "!M!",
}


def peer_matrix(members) -> list[dict]:
    """Rows: each member; cells: how it sees every peer (its own cell is "self"). The row
    of a member whose tray is down says so: its daemon's last report no longer holds. A
    daemon's peers are those of its own clique (indexes count inside a clique): a tray of
    another clique is "other-clique", never a peer."""
    rows = []
    for m in members:
        cells = []
        for peer in members:
            if peer.clique_id != m.clique_id:
                cells.append(("other-clique", "x"))
                continue
            if peer.index == m.index:
                cells.append(("self", "-"))
                continue
            if m.active and m.node.state == "down":
                cells.append(("tray-down", "down"))
                continue
            status = (m.connections or {}).get(str(peer.index)) or ""
            cells.append((status or "unknown", PEER_WORDS.get(status, "·")))
        rows.append({"member": m, "cells": cells})
    return rows


def channel_text(domain: ComputeDomain) -> str:
    # A domain over several cliques holds a channel in each, maybe the same number twice.
    channels = sorted(set(domain_channels(domain))) if domain.is_live else []
    if not channels:
        return ""
    # Numbers, not a count: "channel 3" is /dev/nvidia-caps-imex-channels/channel3.
    if len(channels) > 8:
        return f"channels {channels[0]} to {channels[-1]} ({len(channels)} channels)"
    return ("channel " if len(channels) == 1 else "channels ") + ", ".join(map(str, channels))


def clique_rows(domain: ComputeDomain, members) -> list[dict]:
    """A domain over several cliques: one row per clique (one IMEX ensemble each), in the
    members' order: the clique, its rack, its trays, how many are ready, its channel(s).
    Empty for a domain in one clique (the page's facts say it all). A query per clique for
    its channel."""
    parts = ensembles(members)
    if len(parts) < 2:
        return []
    rows = []
    for part in parts:
        channels = domain_channels(domain, clique_id=part.clique.pk) if domain.is_live else []
        rows.append(
            {
                "clique": part.clique,
                "rack": part.clique.rack,
                "trays": [m.node.hostname for m in part.members],
                "ready": part.ready,
                "channels": channels if len(channels) <= 8 else [],
                "all_channels": len(channels) > 8,
            }
        )
    return rows
