# SPDX-License-Identifier: Apache-2.0
"""The agent ↔ portal contract: the documents both sides exchange, typed and as JSON Schemas.

Four documents travel between a tray's agent and the portal (docs/architecture.md):

- `JoinRequest` (agent → `POST /api/v1/agent/join/`): the tray's facts and one credential,
  the fleet's join token or (Kubernetes) the agent pod's projected service-account token;
- `NodeFacts` (agent → `PUT /api/v1/agent/nodes/<id>/facts/`): the same facts under the
  node token, re-sent whenever they change (a fabric probe completes, NVML comes back, the
  host's IMEX service is found) and after every agent start;
- `DesiredState` (portal → agent, `GET nodes/<id>/desired/`): what the tray should hold;
- `StatusReport` (agent → `POST nodes/<id>/status/`): what the agent observed; the heartbeat.

On a Kubernetes cluster the agent is also the DRA driver of its tray, and two more travel:

- `ClaimRequest` (agent → `POST nodes/<id>/claims/`): a ResourceClaim of a domain is being
  prepared on this tray; the portal admits it (`ClaimAdmission`), the tray joining a domain
  that follows its workload, or refuses it (4xx with a message the user can act on);
- `DELETE nodes/<id>/claims/<claim uid>/`: the claim was unprepared here; the last claim of
  a domain that follows its workload takes the tray out of it.

This module is the single statement of that contract. It is stdlib only and belongs to
neither side: the agent and the portal both import it. The agent validates every desired
state it fetches against `DESIRED_STATE_SCHEMA` before acting on it; the portal's tests
validate what the portal serves and what the agent sends against the same schemas.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class Step:
    """Where the agent is in applying its desired state (`StatusReport.step`)."""

    IDLE = "idle"  # nothing desired, tray clean
    CONFIGURING = "configuring"  # writing config, nodes file, channels, CDI spec
    STARTING_DAEMON = "starting_daemon"
    WAITING_PEERS = "waiting_peers"  # daemon up, not yet READY / peers not all connected
    READY = "ready"  # daemon READY, domain UP, channels present
    RELEASING = "releasing"  # stopping daemon, removing channels/config
    FAILED = "failed"  # could not apply; `error` says why

    ALL = (IDLE, CONFIGURING, STARTING_DAEMON, WAITING_PEERS, READY, RELEASING, FAILED)


class ConditionType:
    """Tray conditions the agent reports: something on the tray an operator must fix.

    A blocking condition keeps the tray out of placement until the agent stops reporting it.
    """

    NVML_UNAVAILABLE = "NvmlUnavailable"  # libnvidia-ml could not be loaded or initialised
    FABRIC_NOT_READY = "FabricNotReady"  # a GPU's NVLink fabric registration is not done
    FABRIC_FAILED = "FabricRegistrationFailed"  # a GPU's registration completed with an error
    FABRIC_INCONSISTENT = "FabricInconsistent"  # the GPUs name different cliques
    HOST_IMEX_SERVICE = "HostImexService"  # the host's own nvidia-imex is enabled or running
    IMEX_CHANNELS_MISSING = "ImexChannelsMissing"  # no nvidia-caps-imex-channels major
    IMEX_BINARY_MISSING = "ImexBinaryMissing"  # no nvidia-imex under the driver root
    IMEX_MGMT_MISSING = "ImexManagementMissing"  # no fabric-imex-mgmt capability to open


FABRIC_STATES = ("NOT_SUPPORTED", "NOT_STARTED", "IN_PROGRESS", "COMPLETED", "FAILED")
PEER_STATUSES = (
    "CONNECTED",
    "NEVER_CONNECTED",
    "RECOVERING",
    "DISCONNECTED",
    "INVALID",
    "VERSION_MISMATCH",
    "NODE_MAP_MISMATCH",
    "AUTHENTICATING",
)
DOMAIN_STATES = ("", "UP", "DEGRADED", "DOWN")


# --- facts (join, facts update) ----------------------------------------------------------------
class GpuFacts(TypedDict):
    index: int
    uuid: str
    product: str
    fabric_state: str  # one of FABRIC_STATES


class Condition(TypedDict):
    type: str  # a ConditionType value
    blocking: bool
    message: str  # what is wrong and what to do, in the words an operator needs


class NodeFacts(TypedDict):
    """What an agent knows about its tray (NVML, /proc/devices, the host, versions)."""

    hostname: str
    ip: str  # "" when unknown: the tray is then never placed
    gpus: list[GpuFacts]
    cluster_uuid: str  # "" when the tray has no (completed) multi-node NVLink clique
    clique_id: int | None
    driver_version: str
    channel_major: int | None  # the nvidia-caps-imex-channels major, None when absent
    channel_count: int
    agent_version: str
    conditions: list[Condition]


class JoinRequest(NodeFacts):
    # Exactly one of the two.
    join_token: NotRequired[str]
    service_account_token: NotRequired[str]  # a JWT for the portal's audience


class JoinResponse(TypedDict):
    node_id: int
    hostname: str
    token: str


# --- desired state -----------------------------------------------------------------------------
class NodeRef(TypedDict):
    id: int
    hostname: str


class Peer(TypedDict):
    index: int
    ip: str
    hostname: str


class ImexPorts(TypedDict):
    server_port: int
    cmd_port: int


class ChannelSpec(TypedDict):
    """`{"mode": "Single", "numbers": [7]}` or, for `All`, `{"mode": "All", "first", "last"}`."""

    mode: Literal["Single", "All"]
    numbers: NotRequired[list[int]]
    first: NotRequired[int]
    last: NotRequired[int]


class DesiredDomain(TypedDict):
    uid: str
    name: str  # "<namespace>/<name>"
    generation: int
    request_id: str
    index: int  # this tray's line in the nodes file
    peers: list[Peer]  # every member in index order, identical on every member
    imex: ImexPorts
    channels: ChannelSpec
    # Set for a domain that follows its workload: the nodes file lists a fixed set of stable
    # names (`portal-imex-<i>`, i < 18, whatever the number), `peers` the members now; names
    # are mapped to the members' IPs in the tray's hosts file and the daemon re-resolves them
    # on SIGUSR1, so a member joining or leaving never restarts the daemons of the others.
    slots: NotRequired[int]
    # True while the domain's members are still changing (a burst of joins or leaves): the
    # portal nudges every member once the burst is over, and a daemon's re-resolve (one per
    # 5 s) is best spent then, on the whole list.
    settling: NotRequired[bool]


class ReleaseOrder(TypedDict):
    uid: str
    request_id: str


class DesiredState(TypedDict):
    """`domain` set: run IMEX for it. `release` set: tear that domain down and report clean.
    Both None: the tray should be clean and idle."""

    node: NodeRef
    domain: DesiredDomain | None
    release: ReleaseOrder | None


# --- status report -----------------------------------------------------------------------------
class PeerStatus(TypedDict):
    index: int
    ip: str
    status: str  # one of PEER_STATUSES


class StatusReport(TypedDict):
    domain_uid: str | None  # the domain the tray serves or is tearing down
    generation_applied: int
    step: str  # one of Step.ALL
    daemon_state: str  # the `nvidia-imex-ctl -q` word, "" when no daemon answers
    domain_state: str  # one of DOMAIN_STATES
    peers: list[PeerStatus]
    channels_present: list[int]
    clean: bool  # no daemon, channel devices, IMEX config or CDI spec left
    error: str
    message: str


# --- DRA claims (agent → portal) -----------------------------------------------------------
class ClaimRef(TypedDict):
    uid: str
    namespace: str
    name: str


class ClaimRequest(TypedDict):
    claim: ClaimRef
    domain_uid: str  # from the claim's opaque config (its ResourceClaimTemplate)


class ClaimAdmission(TypedDict):
    domain_uid: str
    domain_name: str  # "<namespace>/<name>"
    index: int  # the tray's index in the domain
    joined: bool  # True when this claim made the tray a member


# --- JSON Schemas (draft 2020-12) --------------------------------------------------------------
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_HOSTNAME = "^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$"


def _object(properties: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """A closed object: every property named, all required except `optional`."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def _int(minimum: int = 0, maximum: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _text(max_length: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length}


_GPU = _object(
    {
        "index": _int(0, 63),
        "uuid": {"type": "string", "minLength": 1, "maxLength": 64},
        "product": _text(100),
        "fabric_state": {"enum": list(FABRIC_STATES)},
    }
)
CONDITION_SCHEMA: dict[str, Any] = _object(
    {
        "type": {"type": "string", "pattern": "^[A-Z][A-Za-z0-9]{1,63}$"},
        "blocking": {"type": "boolean"},
        "message": {"type": "string", "minLength": 1, "maxLength": 2000},
    }
)
_FACTS_PROPERTIES: dict[str, Any] = {
    "hostname": {"type": "string", "pattern": _HOSTNAME},
    "ip": {
        "anyOf": [
            {"const": ""},
            {"type": "string", "format": "ipv4"},
            {"type": "string", "format": "ipv6"},
        ]
    },
    "gpus": {"type": "array", "items": _GPU, "maxItems": 64},
    "cluster_uuid": {"anyOf": [{"const": ""}, {"type": "string", "pattern": _UUID}]},
    "clique_id": {"anyOf": [{"type": "null"}, _int(0, 2**31 - 1)]},
    "driver_version": _text(40),
    "channel_major": {"anyOf": [{"type": "null"}, _int(1, 4095)]},
    "channel_count": _int(1, 1 << 20),
    "agent_version": _text(40),
    "conditions": {"type": "array", "items": CONDITION_SCHEMA, "maxItems": 32},
}
NODE_FACTS_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "NodeFacts",
    **_object(_FACTS_PROPERTIES),
}
JOIN_REQUEST_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "JoinRequest",
    **_object(
        {
            **_FACTS_PROPERTIES,
            "join_token": {"type": "string", "minLength": 1, "maxLength": 200},
            "service_account_token": {"type": "string", "minLength": 1, "maxLength": 16384},
        },
        optional=("join_token", "service_account_token"),
    ),
    "oneOf": [{"required": ["join_token"]}, {"required": ["service_account_token"]}],
}

_CHANNELS = {
    "oneOf": [
        _object(
            {
                "mode": {"const": "Single"},
                "numbers": {"type": "array", "items": _int(1, 1 << 20), "uniqueItems": True},
            }
        ),
        _object({"mode": {"const": "All"}, "first": _int(1), "last": _int(1)}),
    ]
}
_DOMAIN = _object(
    {
        "uid": {"type": "string", "pattern": _UUID},
        "name": {"type": "string", "minLength": 3, "maxLength": 200},
        "generation": _int(0),
        "request_id": _text(200),
        "index": _int(0, 4095),
        "peers": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "index": _int(0, 4095),
                    "ip": {"type": "string", "minLength": 1, "maxLength": 253},
                    "hostname": _text(253),
                }
            ),
        },
        "imex": _object({"server_port": _int(1, 65535), "cmd_port": _int(1, 65535)}),
        "channels": _CHANNELS,
        "slots": _int(1, 4096),
        "settling": {"type": "boolean"},
    },
    optional=("slots", "settling"),
)
DESIRED_STATE_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "DesiredState",
    **_object(
        {
            "node": _object({"id": _int(1), "hostname": _text(253)}),
            "domain": {"anyOf": [{"type": "null"}, _DOMAIN]},
            "release": {
                "anyOf": [
                    {"type": "null"},
                    _object(
                        {"uid": {"type": "string", "pattern": _UUID}, "request_id": _text(200)}
                    ),
                ]
            },
        }
    ),
}

STATUS_REPORT_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "StatusReport",
    **_object(
        {
            "domain_uid": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": _UUID}]},
            "generation_applied": _int(0),
            "step": {"enum": list(Step.ALL)},
            "daemon_state": _text(32),
            "domain_state": {"enum": list(DOMAIN_STATES)},
            "peers": {
                "type": "array",
                "items": _object(
                    {
                        "index": _int(0, 4095),
                        "ip": _text(253),
                        "status": {"enum": list(PEER_STATUSES)},
                    }
                ),
            },
            "channels_present": {"type": "array", "items": _int(0, 1 << 20), "maxItems": 1 << 16},
            "clean": {"type": "boolean"},
            "error": _text(2000),
            "message": _text(2000),
        }
    ),
}

_K8S_NAME = "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
CLAIM_REQUEST_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "ClaimRequest",
    **_object(
        {
            "claim": _object(
                {
                    "uid": {"type": "string", "pattern": _UUID},
                    "namespace": {"type": "string", "pattern": _K8S_NAME, "maxLength": 63},
                    "name": {"type": "string", "pattern": _K8S_NAME},
                }
            ),
            "domain_uid": {"type": "string", "pattern": _UUID},
        }
    ),
}
CLAIM_ADMISSION_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "ClaimAdmission",
    **_object(
        {
            "domain_uid": {"type": "string", "pattern": _UUID},
            "domain_name": {"type": "string", "minLength": 3, "maxLength": 200},
            "index": _int(0, 4095),
            "joined": {"type": "boolean"},
        }
    ),
}
