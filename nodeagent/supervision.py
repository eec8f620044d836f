# SPDX-License-Identifier: Apache-2.0
"""Keeping the tray's `nvidia-imex` running for the domain it serves.

Its start (held while the trays of a domain that follows its workload are still joining),
its restarts (with backoff when it keeps exiting), the last lines of its log when it
exits, and its re-resolves: SIGUSR1, spaced as the daemon needs and sent once per burst of
membership changes. Who the daemon's parent is (the agent, or the IMEX runner) is the
`Supervisor`'s business; this decides when.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from agentwire.messages import DesiredDomain, StatusReport
from nodeagent import metrics
from nodeagent.config import AgentConfig
from nodeagent.driver import CapabilityError, ensure_imex_mgmt
from nodeagent.facts import FactsKeeper
from nodeagent.host import foreign_daemons
from nodeagent.imex.supervisor import USR1_SPACING_S, Supervisor, describe_exit, log_tail
from nodeagent.traylog import TrayLog

# nvidia-imex processes at most one SIGUSR1 every 5 s (NVIDIA's IMEX guide, "Signal
# handling"); the agent asks for them spaced by a little more (USR1_SPACING_S).
# Joins come in bursts (a workload's pods are scheduled together). A SIGUSR1 sent at the
# first new name would spend the daemon's one re-resolve per 5 s on a partial peer list, and
# the rest would wait 5 s: while the portal says the membership is still `settling`, the
# agent holds the signal (at most RESOLVE_MAX_S after the first change: the portal nudges
# every member when the burst is over); otherwise it sends it RESOLVE_QUIET_S after the
# last change.
RESOLVE_QUIET_S = 0.1
RESOLVE_MAX_S = 6.0
# A tray that joins during such a burst holds its daemon's first start until the portal says
# the burst is over (at most this long), so that the daemon reads the whole peer list at its
# start and needs no SIGUSR1 at all (NVIDIA's daemons, too, skip it for a fresh process).
GATHER_MAX_S = 2.0
# A daemon that ran this long before it exited is started again at once; one that exited
# sooner is started again with backoff.
RESTART_RESET_S = 30.0


class DaemonKeeper:
    def __init__(
        self,
        config: AgentConfig,
        daemon: Supervisor,
        facts: FactsKeeper,
        log: TrayLog,
        *,
        on_start: Callable[[], None],
    ) -> None:
        self.cfg = config
        self.paths = config.paths
        self.daemon = daemon
        self.facts = facts
        self.log = log
        self.on_start = on_start  # a new daemon: its observer starts looking afresh
        self.wait_started = 0.0  # when the daemon was started or re-adopted
        self.restart_at = 0.0  # when an exited daemon is started again
        self.restart_delay = 0.0
        self.usr1_at = -USR1_SPACING_S  # when the daemon was last told to re-resolve
        self.resolve_due = 0.0  # when to tell it next (0: nothing pending)
        self.resolve_since = 0.0  # when the first change not yet signalled was written
        self.hosts_map: dict[str, str] = {}  # name → IP, as last written to the hosts file
        self.gather: tuple[str, float] = ("", 0.0)  # (domain uid, first seen) before a start

    # --- running it -------------------------------------------------------------------------
    def keep_running(self, uid: str, now: float, error: str) -> str:
        """Start the daemon unless it runs (or `error` says the tray is not ready for it);
        tell a running one to re-resolve when that is due. Returns the error to report."""
        if not self.daemon.running():
            error = error or self.start_daemon()
            if self.daemon.running():
                self.resolve_due = self.resolve_since = 0.0  # it resolves every name at start
                self.gather = (uid, -math.inf)  # gathered once: a restart holds nothing
        elif self.resolve_due and now >= self.resolve_due:
            self.re_resolve()
        return error

    def gather_hold(self, want: DesiredDomain, now: float) -> float:
        """How long to hold the daemon's first start for a domain whose members are still
        joining (0: start it)."""
        if not want.get("slots") or self.daemon.running() or self.daemon.exit_code is not None:
            return 0.0
        if self.gather[0] != want["uid"]:
            self.gather = (want["uid"], now)
        if not want.get("settling"):
            return 0.0
        return max(self.gather[1] + GATHER_MAX_S - now, 0.0)

    def start_daemon(self) -> str:
        """Start the tray's daemon unless something stops it; returns what went wrong.

        A daemon that exits soon after its start (IMEX refusing a driver it does not match,
        a bad config) is started again with backoff, 1 s doubling to a minute, not on every
        fast poll; one that had run a while is started again at once.
        """
        blocked = self.daemon.problem() or self.start_blocked()
        if blocked:
            return blocked
        code, now = self.daemon.exit_code, time.monotonic()
        if self.daemon.adopt():  # ours runs already (started by an agent that died at once)
            self.wait_started, self.restart_at = now, 0.0
            return ""
        if code is not None:
            if not self.restart_at:  # the first look at this exit
                lived = now - self.wait_started
                short = lived < RESTART_RESET_S
                self.restart_delay = min(max(2 * self.restart_delay, 1.0), 60.0) if short else 0
                self.restart_at = now + self.restart_delay
            if now < self.restart_at:
                return (
                    f"nvidia-imex exited ({describe_exit(code)}); starting it again in "
                    f"{self.restart_delay:.0f} s" + self.daemon_log_tail()
                )
        tail = self.daemon_log_tail() if code is not None else ""  # before it logs anew
        self.daemon.start()
        self.on_start()
        self.wait_started, self.restart_at = now, 0.0
        if code is None:
            return ""
        metrics.daemon_restarted()
        return f"nvidia-imex exited ({describe_exit(code)}); restarted it" + tail

    def daemon_log_tail(self) -> str:
        """The last lines of the daemon's log, after a newline, for an error that says it
        exited: the cause is there (the portal's tray page shows them)."""
        lines = log_tail(self.paths.daemon_log)
        return "\nIts log ends:\n" + "\n".join(lines) if lines else ""

    def start_blocked(self) -> str:
        """A second daemon on a tray fails (NV_ERR_IN_USE): say why instead of looping."""
        self.facts.check_host()
        running = foreign_daemons(self.paths)
        if running:
            return (
                f"not starting nvidia-imex: another one runs on this tray (pid {running[0][0]}); "
                "disable the host's nvidia-imex.service"
            )
        return self.facts.missing_binary() or self.imex_mgmt_device()

    def imex_mgmt_device(self) -> str:
        """nvidia-imex opens the driver's fabric-imex-mgmt capability device: made here if
        missing (the IMEX runner makes it too, in its own /dev); what stops it, or ""."""
        try:
            ensure_imex_mgmt(self.paths.root, emulated_files=self.cfg.emulated_channel_files)
        except CapabilityError as exc:
            return str(exc)
        return ""

    def stop(self) -> None:
        """Stop the daemon for a release; nothing is pending for it any more."""
        self.restart_at = self.restart_delay = 0.0
        self.resolve_due = self.resolve_since = 0.0
        self.hosts_map = {}
        self.daemon.stop(self.cfg.stop_timeout)

    # --- peers of a domain that follows its workload ----------------------------------------
    def follow_peers(self, hosts: Mapping[str, str], *, settling: bool) -> None:
        """The names and the members' addresses now (name → IP, every name of the nodes
        file) into the hosts file the daemon reads; a running daemon re-resolves them once
        per burst."""
        self.daemon.set_hosts(hosts)
        changed = dict(hosts) != self.hosts_map
        self.hosts_map = dict(hosts)
        if self.daemon.running():
            # A new member and one that left alike (its name now points nowhere: the daemon
            # must stop trying an address another domain's tray may get next, as NVIDIA's
            # daemons are told) are re-resolved once per burst. A daemon not started yet
            # reads them at start.
            self.resolve_later(changed=changed, settling=settling)

    def paced(self, want: DesiredDomain, report: StatusReport, delay: float) -> float:
        """The cycle's `delay`, shortened to when the daemon is next told to re-resolve."""
        if want.get("slots") and not self.resolve_due and unresolved(report):
            # Level-triggered: a member this daemon has never reached although the hosts
            # file names it (a SIGUSR1 the daemon ignored as too soon, one lost in a busy
            # moment) is asked for again once 5 s have passed since the daemon's start and
            # since the last SIGUSR1.
            self.resolve_due = max(self.usr1_at, self.wait_started) + USR1_SPACING_S
        if self.resolve_due:
            delay = min(delay, max(self.resolve_due - time.monotonic(), 0.01))
        return delay

    def re_resolve(self) -> None:
        """Have the daemon re-read its hosts file: its parent sends it SIGUSR1 (processed at
        most every 5 s, so the agent spaces them; one that came too soon would be ignored
        and the change missed). The agent never signals a daemon of another PID namespace."""
        if self.daemon.pid is None:
            return
        self.daemon.resolve()
        self.log.info("IMEX peers changed; nvidia-imex told to re-resolve (SIGUSR1)")
        self.usr1_at, self.resolve_due, self.resolve_since = time.monotonic(), 0.0, 0.0

    def resolve_later(self, *, changed: bool, settling: bool) -> None:
        """One SIGUSR1 for the names that got a new address, once the burst is over."""
        now = time.monotonic()
        if changed:
            self.resolve_since = self.resolve_since or now
        elif not self.resolve_since:
            return  # nothing waits for a re-resolve
        due = self.resolve_since + RESOLVE_MAX_S if settling else now + RESOLVE_QUIET_S
        due = min(due, self.resolve_since + RESOLVE_MAX_S)
        self.resolve_due = max(due, self.usr1_at + USR1_SPACING_S)


def unresolved(report: StatusReport) -> bool:
    return report["daemon_state"] == "READY" and any(
        p["status"] == "NEVER_CONNECTED" for p in report["peers"]
    )
