"""The agent's status report, as the portal understands it (the contract with nodeagent/)."""

from __future__ import annotations

from dataclasses import dataclass, field

# A report's `step`: the contract's own definition, one for both sides.
from agentwire.messages import Step as Step


@dataclass(frozen=True)
class PeerStatus:
    index: int
    ip: str
    status: str  # CONNECTED, NEVER_CONNECTED, RECOVERING, DISCONNECTED, INVALID,
    # VERSION_MISMATCH, NODE_MAP_MISMATCH (the words for C, N, R, D, I, !V!, !M!)


@dataclass(frozen=True)
class AgentReport:
    """What one agent observed on its tray. Doubles as the heartbeat."""

    domain_uid: str | None  # the domain the tray currently serves or is tearing down
    generation_applied: int  # generation of the desired state the tray now matches
    step: str
    daemon_state: str = ""  # nvidia-imex-ctl -q word, "" when no daemon runs
    domain_state: str = ""  # UP / DEGRADED / DOWN from -N -j, "" when unknown
    peers: list[PeerStatus] = field(default_factory=list)
    channels_present: list[int] = field(default_factory=list)
    clean: bool = False  # no daemon, no channel devices, no IMEX config, no CDI spec
    error: str = ""
    message: str = ""
