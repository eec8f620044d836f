# SPDX-License-Identifier: Apache-2.0
"""Looking at the tray's daemon and its domain, and how soon to look again.

A look is `nvidia-imex-ctl -q` (the daemon's word) and, when it matters, `-N -j` (the
domain's state and this tray's connection to every peer); a READY daemon is looked at with
`-N -j` alone, and so is a new daemon the first time it listens (it is READY then, as a
rule, and `-q` would only be followed by `-N -j`). While the daemon starts or its peers
connect the agent looks often, backing off while nothing changes; a domain that stays UP is
looked at less and less often.
"""

from __future__ import annotations

import contextlib
import time

from agentwire.messages import DesiredDomain, StatusReport, Step
from nodeagent.config import AgentConfig
from nodeagent.imex.ctl import Ctl, CtlError, DomainHealth, accepts
from nodeagent.report import Reporter
from nodeagent.supervision import DaemonKeeper
from nodeagent.traylog import TrayLog

STARTING_STATES = {"", "UNAVAILABLE", "INITIALIZING", "STARTING_AUTH_SERVER"}
MISMATCHES = {"NODE_MAP_MISMATCH": "node map", "VERSION_MISMATCH": "version"}


class Observer:
    def __init__(
        self,
        config: AgentConfig,
        ctl: Ctl,
        keeper: DaemonKeeper,
        reporter: Reporter,
        log: TrayLog,
    ) -> None:
        self.cfg = config
        self.ctl = ctl
        self.keeper = keeper
        self.reporter = reporter
        self.log = log
        self.next_health_check = 0.0
        self.start_poll = config.start_poll_interval
        self.ready_poll = config.ready_poll_interval
        self.last_view: tuple[str, DomainHealth | None] = ("", None)  # while waiting
        self.daemon_ready = False  # the daemon said READY at the last look
        self.domain_first = True  # the daemon's first look once it listens: `-N -j` alone

    def daemon_started(self) -> None:
        """A new daemon: not READY, and looked at quickly again."""
        self.daemon_ready = False
        self.domain_first = True
        self.start_poll = self.cfg.start_poll_interval

    def observe(
        self, want: DesiredDomain, index: int, present: list[int], error: str
    ) -> tuple[StatusReport, float]:
        """Read the daemon's state (and the domain's when it matters) into a report; returns
        it with how long to wait before the next look."""
        state, health = self.look(want, index, time.monotonic())
        if state == "READY" and health and health.state == "UP" and not error:
            # A domain that stays up is looked at less and less often (each look is a `-N`
            # across every member's daemon); any other observation starts again from 2 s.
            step, delay, message = Step.READY, self.ready_poll, "IMEX domain UP"
            self.ready_poll = min(self.ready_poll * 2, self.cfg.ready_poll_max)
        else:
            self.ready_poll = self.cfg.ready_poll_interval
            step = Step.STARTING_DAEMON if state in STARTING_STATES else Step.WAITING_PEERS
            delay = self.waiting_poll(state, health)
            message, mismatch = describe_wait(state, health)
            error = error or mismatch
        report = self.reporter.doc(
            uid=want["uid"],
            generation=want["generation"],
            step=step,
            daemon_state=state,
            domain_state=health.state if health else "",
            peers=health.peers if health else [],
            channels=present,
            error=error,
            message=message,
        )
        return report, delay

    def look(self, want: DesiredDomain, index: int, now: float) -> tuple[str, DomainHealth | None]:
        """The daemon's word and, when it matters, the domain's health."""
        state, health = "", None
        listening = self.daemon_ready or self.listening(want, index)
        first = listening and self.domain_first and not self.daemon_ready
        if self.daemon_ready or first:
            # One call where it would be two: a READY daemon's `-N -j` row for this node
            # carries the word `-q` prints. Anything but READY there is checked with `-q`.
            # A new daemon is READY, as a rule, once it listens: its first look is the
            # same single call (not READY yet: `-q` from then on, as before).
            self.domain_first = False
            with contextlib.suppress(CtlError):  # -q says what went wrong
                health = self.ctl.domain(index)
            state = "READY" if health and health.own_state == "READY" else ""
            if first and state:
                self.next_health_check = now + 1.0  # as after `-q` and `-N -j`
            elif first:
                health = None  # the look `-q` alone would have made
        if not state:
            if self.daemon_ready:
                listening = self.listening(want, index)
            state = self.ctl.query() if listening else ""
        waited = now - self.keeper.wait_started
        if health is None and (
            state == "READY" or (state and now >= self.next_health_check and waited > 1.0)
        ):
            health = self.ctl.domain(index)
            self.next_health_check = now + 1.0
        self.daemon_ready = state == "READY"
        if health is not None and want.get("slots"):
            health = members_only(health, want)
        self.log.debug("observed daemon=%s domain=%s", state, health.state if health else "-")
        return state, health

    @staticmethod
    def listening(want: DesiredDomain, index: int) -> bool:
        """Whether the daemon accepts connections on its command port yet (before it does,
        `nvidia-imex-ctl` could only say it could not connect)."""
        own = next((p["ip"] for p in want["peers"] if p["index"] == index), "")
        return not own or accepts(own, want["imex"]["cmd_port"])

    def waiting_poll(self, state: str, health: DomainHealth | None) -> float:
        """Back off from fast polling: quick when formation is quick, cheap when it is not.

        Up to 0.2 s while the daemon starts or peers keep connecting; up to 0.5 s while a
        READY daemon's view stays the same (peers whose daemons have not started: each look
        is a `-N` across every member that is up)."""
        seen_state, seen_health = self.last_view
        changed = state != seen_state or (health is not None and health != seen_health)
        self.last_view = (state, health or seen_health)
        if changed:
            self.start_poll = min(self.start_poll, 0.1)
        delay = self.start_poll
        cap = 0.5 if state == "READY" and not changed else 0.2
        self.start_poll = min(self.start_poll * 1.4, cap)
        return delay


def describe_wait(state: str, health: DomainHealth | None) -> tuple[str, str]:
    """What the tray waits for, in words, and the mismatch that makes it an error."""
    if health is None:
        return f"nvidia-imex {state or 'not answering'}", ""
    bad = [p for p in health.peers if p["status"] != "CONNECTED"]
    mismatched = [p for p in bad if p["status"] in MISMATCHES]
    if mismatched:
        text = "; ".join(
            f"{MISMATCHES[p['status']]} mismatch with node #{p['index']} ({p['ip']})"
            for p in mismatched
        )
        return f"nvidia-imex {state}: {text}", text
    names = ", ".join(f"#{p['index']} {p['ip']} {p['status'].lower()}" for p in bad[:5])
    more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
    return f"nvidia-imex {state}, domain {health.state}: {names}{more}".rstrip(": "), ""


def members_only(health: DomainHealth, want: DesiredDomain) -> DomainHealth:
    """A domain that follows its workload lists a name per slot; the slots no member holds
    never answer, so the daemon calls the domain DEGRADED for good. What matters is the
    members: UP when this tray is connected to every other member."""
    members = {p["index"] for p in want["peers"]} - {want["index"]}
    peers = [p for p in health.peers if p["index"] in members]
    state = health.state
    if state in ("UP", "DEGRADED") and all(p["status"] == "CONNECTED" for p in peers):
        state = "UP" if len(peers) == len(members) else "DEGRADED"
    return DomainHealth(state=state, peers=peers, own_state=health.own_state)
