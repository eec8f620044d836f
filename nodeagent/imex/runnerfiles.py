# SPDX-License-Identifier: Apache-2.0
"""The two files the agent and the IMEX runner (`nodeagent.runner`) talk through, in the
agent's directory (`<state dir>/runner/`, a host path both pods mount).

- `request.json` (`RunnerRequest`), written by the agent alone: whether a daemon should
  run (`run`) and which instance (a new number: a new daemon), its `config`, and for a
  domain that follows its workload the peers to write into the runner's own hosts file
  (`hosts`, name → IP: every name of its nodes file, `peers_generation` raised with every
  new list) and `resolve`, a counter the agent raises when the running daemon must
  re-resolve the names (SIGUSR1).
- `status.json` (`RunnerStatus`), written by the runner alone, at least every 2 s: the
  instance it runs, its pid (in the runner's own PID namespace: for reading only),
  whether it runs, its exit code, how many daemons it started, the runner's own pid and
  version, the peer list it wrote (`peers_generation`) and the last `resolve` it acted on.

Level-triggered, like the agent: each side rewrites its whole file atomically and reads
the other's whole. Typed as the agent ↔ portal contract's documents are (`agentwire`),
their JSON Schemas generated from the types. `protocol` says which version of this
exchange the writer speaks; a file without it is of version 1 (the first). Version 2 states
the peers as the whole block of names (`hosts`: every name, a slot no member holds mapped to
a sentinel address, names carrying the domain's token), where version 1 stated the members
by slot (`peers`, which a runner of version 1 writes as `portal-imex-<slot>` lines); an
agent of version 2 writes both while the names have no token. A field left
out reads as its default, and a field a newer writer added is kept as it is read, so the
runner (updated only when its pod is deleted, `OnDelete`) and the agent (updated
freely) read each other across versions.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, NotRequired, TypedDict

from agentwire.schema import json_schema, wire, with_defaults
from nodeagent.config import Paths
from nodeagent.files import read_json, write_atomic

PROTOCOL = 2
HEARTBEAT_S = 2.0  # the runner rewrites its status at least this often
STALE_S = 10.0  # a status older than this: the runner is not running


class RunnerRequest(TypedDict):
    protocol: Annotated[int, wire(1, minimum=1)]
    run: Annotated[bool, wire(False)]
    instance: Annotated[int, wire(0, minimum=0)]
    config: Annotated[str, wire("")]  # the daemon's config file ("": the agent's default)
    # The peers of a domain that follows its workload: every name of its nodes file → IP.
    hosts: Annotated[dict[str, str], wire({})]
    # The same members by slot (slot → IP), for a runner of protocol 1; {} for names with a
    # token, which such a runner cannot write.
    peers: Annotated[dict[str, str], wire({})]
    peers_generation: Annotated[int, wire(0, minimum=0)]
    resolve: Annotated[int, wire(0, minimum=0)]


class RunnerStatus(TypedDict):
    protocol: Annotated[int, wire(1, minimum=1)]
    instance: Annotated[int, wire(0, minimum=0)]  # 0: none started by this runner
    pid: Annotated[int | None, wire(None)]
    running: Annotated[bool, wire(False)]
    exit_code: Annotated[int | None, wire(None)]  # of a daemon that exited on its own
    starts: Annotated[int, wire(0, minimum=0)]
    runner_pid: Annotated[int | None, wire(None)]
    version: Annotated[str, wire("")]  # the runner's release (AGENT_VERSION)
    # Left out by a runner too old to write peers into its hosts file.
    peers_generation: NotRequired[Annotated[int, wire(minimum=0)]]
    resolved: Annotated[int, wire(0, minimum=0)]
    updated_at: Annotated[float, wire(0.0)]  # time.time() of the write


REQUEST_SCHEMA = json_schema(RunnerRequest)
STATUS_SCHEMA = json_schema(RunnerStatus)


def request_path(paths: Paths) -> Path:
    return paths.runner_dir / "request.json"


def status_path(paths: Paths) -> Path:
    return paths.runner_dir / "status.json"


def read_request(paths: Paths) -> RunnerRequest:
    """The agent's request; no file reads as "run nothing"."""
    request: RunnerRequest = with_defaults(RunnerRequest, read_json(request_path(paths)) or {})
    return request


def read_status(path: Path) -> RunnerStatus | None:
    """The runner's status; None when it never wrote one (or it cannot be read)."""
    doc = read_json(path)
    if doc is None:
        return None
    status: RunnerStatus = with_defaults(RunnerStatus, doc)
    return status


def fresh(status: RunnerStatus | None) -> bool:
    """Whether the status was written by a runner that runs now."""
    return status is not None and time.time() - status["updated_at"] < STALE_S


def running_version(path: Path) -> str | None:
    """The release of the runner that runs now ("" for one too old to say); None: none."""
    status = read_status(path)
    return status["version"] if fresh(status) and status is not None else None


def write_request(paths: Paths, request: RunnerRequest) -> None:
    write_atomic(request_path(paths), _dump(request), durable=False)


def write_status(paths: Paths, status: RunnerStatus) -> None:
    write_atomic(status_path(paths), _dump(status), durable=False)


def _dump(doc: RunnerRequest | RunnerStatus) -> str:
    return json.dumps(doc, sort_keys=True) + "\n"
