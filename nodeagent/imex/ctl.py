# SPDX-License-Identifier: Apache-2.0
"""`nvidia-imex-ctl`: the daemon's state word (`-q`) and the domain's health (`-N -j`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentwire.messages import PeerStatus
from nodeagent.config import Paths


@dataclass(frozen=True)
class DomainHealth:
    state: str  # UP | DEGRADED | DOWN, "" when unknown
    peers: list[PeerStatus] = field(default_factory=list)
    # This node's own row: the local daemon's state, the word `-q` prints ("" if absent).
    own_state: str = ""


def parse_domain_json(text: str, own_index: int) -> DomainHealth:
    """`nvidia-imex-ctl -N -j` → domain state and this node's connection to every peer."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    node = doc.get("nodes", {}).get(str(own_index), {})
    peers: list[PeerStatus] = [
        {"index": int(j), "ip": str(conn.get("host", "")), "status": str(conn.get("status", ""))}
        for j, conn in sorted(node.get("connections", {}).items(), key=lambda kv: int(kv[0]))
    ]
    return DomainHealth(
        state=str(doc.get("status", "")), peers=peers, own_state=str(node.get("status", ""))
    )


class CtlError(RuntimeError):
    pass


def accepts(ip: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts connections on the daemon's command port yet.

    A starting daemon does not listen for a while; asking `nvidia-imex-ctl -q` then costs a
    process that can only say it could not connect. A connect from here tells the same for
    a fraction of it (the ctl connects to the same address and port)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


class Ctl:
    """`nvidia-imex-ctl` against our config file."""

    def __init__(
        self, argv: list[str], paths: Paths, timeout: float, env: Mapping[str, str] | None = None
    ) -> None:
        self.argv = argv
        self.paths = paths
        self.timeout = timeout
        # The agent's own environment is passed as None (inherited as it is): a dict is
        # encoded variable by variable at every call, a tenth of a call's cost in the agent.
        self.env = None if env is None or env == os.environ else dict(env)

    def _run(self, *flags: str) -> str:
        try:
            done = subprocess.run(
                [*self.argv, "-c", str(self.paths.imex_config), *flags],
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env=self.env,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CtlError(f"nvidia-imex-ctl {' '.join(flags)}: {exc}") from exc
        return done.stdout

    def query(self) -> str:
        """The daemon's state word; ready means exactly `READY`."""
        out = self._run("-q").strip()
        return out if out and " " not in out else ""

    def domain(self, own_index: int) -> DomainHealth:
        text = self._run("-N", "-j")
        try:
            return parse_domain_json(text, own_index)
        except (ValueError, AttributeError, TypeError) as exc:
            raise CtlError(f"nvidia-imex-ctl -N -j: not the expected JSON: {text[:200]!r}") from exc
