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
neither side: the agent and the portal both import it. Each document is a `TypedDict` whose
fields carry their JSON Schema keywords (`agentwire.schema`); the `*_SCHEMA` documents are
generated from them, and so is the portal's validation of what agents send. The agent
validates every desired state it fetches against `DESIRED_STATE_SCHEMA` before acting on
it; the portal's tests validate what the portal serves against the same schemas.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from agentwire.gpuhealth import GpuHealthSample
from agentwire.schema import json_schema, object_schema, wire, with_defaults


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


UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
HOSTNAME_PATTERN = "^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$"
K8S_NAME_PATTERN = "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"

Uuid = Annotated[str, wire(pattern=UUID_PATTERN)]


def _int(minimum: int = 0, maximum: int | None = None) -> Any:
    return wire(minimum=minimum) if maximum is None else wire(minimum=minimum, maximum=maximum)


def _text(max_length: int, min_length: int = 0) -> Any:
    if min_length:
        return wire(minLength=min_length, maxLength=max_length)
    return wire(maxLength=max_length)


# --- facts (join, facts update) ----------------------------------------------------------------
class GpuFacts(TypedDict):
    index: Annotated[int, wire(minimum=0, maximum=63, description="NVML's GPU index.")]
    uuid: Annotated[
        str, wire(minLength=1, maxLength=64, description="The GPU's UUID, as NVML gives it.")
    ]
    product: Annotated[str, wire("", maxLength=100, description="e.g. GB200.")]
    fabric_state: Annotated[
        str,
        wire(
            "COMPLETED",
            enum=list(FABRIC_STATES),
            description="Its NVLink fabric registration, as NVML reports it.",
        ),
    ]
    vbios_version: NotRequired[
        Annotated[
            str, wire("", maxLength=40, description="Its VBIOS (firmware) version, from NVML.")
        ]
    ]


class Condition(TypedDict):
    type: Annotated[
        str,
        wire(
            pattern="^[A-Z][A-Za-z0-9]{1,63}$",
            description="What is wrong (a ConditionType), e.g. `FabricNotReady`.",
        ),
    ]
    blocking: Annotated[bool, wire(description="Keeps the tray out of placement.")]
    message: Annotated[
        str,
        wire(
            minLength=1,
            maxLength=2000,
            description="What is wrong and what to do, in an operator's words.",
        ),
    ]


class NodeFacts(TypedDict):
    """What an agent knows about its tray (NVML, /proc/devices, the host, versions). The
    agent sends every field but `imex_version`; the portal reads one left out as its
    default."""

    hostname: Annotated[str, wire(pattern=HOSTNAME_PATTERN, description="The tray's hostname.")]
    ip: Annotated[
        str,
        wire(
            "",
            any_of=[
                {"const": ""},
                {"type": "string", "format": "ipv4"},
                {"type": "string", "format": "ipv6"},
            ],
            description="Where its peers reach its IMEX daemon; empty: unknown (never placed).",
        ),
    ]
    gpus: Annotated[list[GpuFacts], wire([], maxItems=64, description="Its GPUs.")]
    cluster_uuid: Annotated[
        str,
        wire(
            "",
            any_of=[{"const": ""}, {"type": "string", "pattern": UUID_PATTERN}],
            description="Its NVLink fabric's cluster UUID; empty: no completed multi-node NVLink.",
        ),
    ]
    clique_id: Annotated[
        Annotated[int, _int(0, 2**31 - 1)] | None,
        wire(None, description="Its clique in that fabric."),
    ]
    driver_version: Annotated[
        str, wire("", maxLength=40, description="The NVIDIA driver's version.")
    ]
    imex_version: NotRequired[
        Annotated[
            str,
            wire("", maxLength=40, description="nvidia-imex's version, when not the driver's."),
        ]
    ]
    channel_major: Annotated[
        Annotated[int, _int(1, 4095)] | None,
        wire(None, description="The nvidia-caps-imex-channels device major; null when absent."),
    ]
    channel_count: Annotated[
        int,
        wire(2048, minimum=1, maximum=1 << 20, description="IMEX channels the driver offers."),
    ]
    agent_version: Annotated[str, wire("", maxLength=40, description="The agent's own version.")]
    conditions: Annotated[
        list[Condition], wire([], maxItems=32, description="What an operator must fix.")
    ]


class JoinRequest(NodeFacts):
    # Exactly one of the two.
    join_token: NotRequired[Annotated[str, _text(200, 1)]]
    # A JWT for the portal's audience.
    service_account_token: NotRequired[Annotated[str, _text(16384, 1)]]


# "node" on the wire (node_id, NodeRef, NodeFacts, the nodes/<id>/ URLs) is the tray: the
# name agents have spoken since the first version, kept for compatibility. A Kubernetes
# Node is always called that, in full.
class JoinResponse(TypedDict):
    node_id: int
    hostname: str
    token: str


# --- desired state -----------------------------------------------------------------------------
class NodeRef(TypedDict):
    id: Annotated[int, _int(1)]
    hostname: Annotated[str, _text(253)]


class Peer(TypedDict):
    index: Annotated[int, _int(0, 4095)]
    ip: Annotated[str, _text(253, 1)]
    hostname: Annotated[str, _text(253)]


class ImexPorts(TypedDict):
    server_port: Annotated[int, _int(1, 65535)]
    cmd_port: Annotated[int, _int(1, 65535)]


class SingleChannels(TypedDict):
    mode: Literal["Single"]
    numbers: Annotated[list[Annotated[int, _int(1, 1 << 20)]], wire(uniqueItems=True)]


class AllChannels(TypedDict):
    """Every channel the tray's driver offers, channel 0 included (NVIDIA's All mode)."""

    mode: Literal["All"]
    first: Annotated[int, _int(0)]
    last: Annotated[int, _int(0)]


class ChannelSpec(TypedDict):
    """`{"mode": "Single", "numbers": [7]}` or, for `All`, `{"mode": "All", "first", "last"}`
    (on the wire, exactly one of `SingleChannels` and `AllChannels`)."""

    mode: Literal["Single", "All"]
    numbers: NotRequired[list[int]]
    first: NotRequired[int]
    last: NotRequired[int]


class DesiredDomain(TypedDict):
    uid: Uuid
    name: Annotated[str, _text(200, 3)]  # "<namespace>/<name>"
    generation: Annotated[int, _int(0)]
    request_id: Annotated[str, _text(200)]
    index: Annotated[int, _int(0, 4095)]  # this tray's line in the nodes file
    # Every member in index order, identical on every member.
    peers: Annotated[list[Peer], wire(minItems=1)]
    imex: ImexPorts
    channels: Annotated[ChannelSpec, wire(one_of=(SingleChannels, AllChannels))]
    # Set for a domain that follows its workload: the nodes file lists a fixed set of stable
    # names (`portal-imex-<names>-<i>`, i < 18, whatever the number), `peers` the members
    # now; every name is mapped in the tray's hosts file (a member's IP, or a sentinel
    # address for a slot nobody holds) and the daemon re-resolves them on SIGUSR1, so a
    # member joining or leaving never restarts the daemons of the others.
    slots: NotRequired[Annotated[int, _int(1, 4096)]]
    # The domain's token in those names, so that no two domains' daemons list the same
    # names. Left out for a domain from before names carried one (`portal-imex-<i>`).
    names: NotRequired[Annotated[str, wire(pattern="^[0-9a-z]{1,16}$")]]
    # True while the domain's members are still changing (a burst of joins or leaves): the
    # portal nudges every member once the burst is over, and a daemon's re-resolve (one per
    # 5 s) is best spent then, on the whole list.
    settling: NotRequired[bool]


class ReleaseOrder(TypedDict):
    uid: Uuid
    request_id: Annotated[str, _text(200)]


class DesiredState(TypedDict):
    """`domain` set: run IMEX for it. `release` set: tear that domain down and report clean.
    Both None: the tray should be clean and idle."""

    node: NodeRef
    domain: DesiredDomain | None
    release: ReleaseOrder | None
    # Whether a claim may make the tray a new member now (ready, in a clique with an IP, no
    # blocking condition): the DRA slice says so, so the scheduler never picks a tray the
    # claim's admission would refuse. Left out by an older portal: taken as True.
    eligible: NotRequired[bool]


# --- status report -----------------------------------------------------------------------------
class PeerStatus(TypedDict):
    index: Annotated[int, _int(0, 4095)]
    ip: Annotated[str, _text(253)]
    # One of PEER_STATUSES: the words for nvidia-imex-ctl's C, N, R, D, I, !V!, !M!.
    status: Annotated[str, wire(enum=list(PEER_STATUSES))]


class StatusReport(TypedDict):
    """What one agent observed on its tray; doubles as the heartbeat. The agent sends every
    field; the portal reads one left out as its default."""

    # The domain the tray serves or is tearing down.
    domain_uid: Annotated[Uuid | None, wire(default=None)]
    # Generation of the desired state the tray now matches.
    generation_applied: Annotated[int, _int(0)]
    step: Annotated[str, wire(enum=list(Step.ALL))]
    # The `nvidia-imex-ctl -q` word, "" when no daemon answers.
    daemon_state: Annotated[str, wire("", maxLength=32)]
    domain_state: Annotated[str, wire("", enum=list(DOMAIN_STATES))]
    peers: Annotated[list[PeerStatus], wire([])]
    channels_present: Annotated[list[Annotated[int, _int(0, 1 << 20)]], wire([], maxItems=1 << 16)]
    # No daemon, channel devices, IMEX config or CDI spec left.
    clean: Annotated[bool, wire(False)]
    error: Annotated[str, wire("", maxLength=2000)]
    message: Annotated[str, wire("", maxLength=2000)]
    link_error: Annotated[
        str,
        wire(
            "",
            maxLength=2000,
            description=(
                "The newest failure of the agent's calls to the portal other than this report "
                "(fetching the desired state, sending facts, joining, a claim's admission), as "
                '"<call>: <what happened>", e.g. "desired state: HTTP 500 Internal Server '
                'Error"; "" once that call succeeds again.'
            ),
        ),
    ]
    gpu_health: NotRequired[
        Annotated[
            list[GpuHealthSample],
            wire(
                maxItems=64,
                description=(
                    "Each GPU's temperature, power, XIDs, NVLink and ECC error counters, in "
                    "one report every GPU-health interval (about a minute), not in every "
                    "heartbeat; left out by agents that do not read them."
                ),
            ),
        ]
    ]


# --- DRA claims (agent → portal) -----------------------------------------------------------
class ClaimRef(TypedDict):
    uid: Annotated[Uuid, wire(description="The ResourceClaim's uid.")]
    namespace: Annotated[
        str, wire(pattern=K8S_NAME_PATTERN, maxLength=63, description="Its namespace.")
    ]
    name: Annotated[str, wire(pattern=K8S_NAME_PATTERN, description="Its name.")]


class ClaimRequest(TypedDict):
    """A DRA claim the tray's agent is about to prepare."""

    claim: Annotated[ClaimRef, wire(description="The ResourceClaim the kubelet asks to prepare.")]
    domain_uid: Annotated[
        Uuid, wire(description="From the claim's opaque config (its ResourceClaimTemplate).")
    ]


class ClaimAdmission(TypedDict):
    """The portal's answer: the claim may be prepared on this tray."""

    domain_uid: Annotated[Uuid, wire(description="The domain's uid.")]
    domain_name: Annotated[str, wire(minLength=3, maxLength=200, description="<namespace>/<name>")]
    index: Annotated[
        int,
        wire(
            minimum=-1,
            maximum=4095,
            description=(
                "The tray's index in the domain; -1 for a tray in no NVLink clique, whose "
                "claim is prepared without an IMEX channel (as NVIDIA's driver does)."
            ),
        ),
    ]
    joined: Annotated[bool, wire(description="True when this claim made the tray a member.")]


# --- JSON Schemas (draft 2020-12), generated from the types above -----------------------------
CONDITION_SCHEMA: dict[str, Any] = object_schema(Condition)
NODE_FACTS_SCHEMA = json_schema(NodeFacts)
JOIN_REQUEST_SCHEMA = json_schema(
    JoinRequest, oneOf=[{"required": ["join_token"]}, {"required": ["service_account_token"]}]
)
DESIRED_STATE_SCHEMA = json_schema(DesiredState)
STATUS_REPORT_SCHEMA = json_schema(StatusReport)
CLAIM_REQUEST_SCHEMA = json_schema(ClaimRequest)
CLAIM_ADMISSION_SCHEMA = json_schema(ClaimAdmission)


def status_report(**fields: Any) -> StatusReport:
    """A report of the given fields, each other one as the portal reads it when left out."""
    report: StatusReport = with_defaults(StatusReport, fields)
    return report


def node_facts(**fields: Any) -> NodeFacts:
    """A tray's facts of the given fields, each other one as the portal reads it when left
    out."""
    facts: NodeFacts = with_defaults(NodeFacts, fields)
    return facts
