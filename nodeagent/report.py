# SPDX-License-Identifier: Apache-2.0
"""The agent's status reports: what it writes, and when it sends one.

Each report is also the tray's heartbeat. It goes out on every change and, unchanged, as
a jittered heartbeat; a passing step is held until it has lasted a moment (see `send`).
Every report carries the newest failure of the agent's other calls to the portal.
"""

from __future__ import annotations

import random
import time
from typing import cast

from agentwire.messages import PeerStatus, StatusReport, Step
from nodeagent.client import PortalClient, PortalError
from nodeagent.config import AgentConfig
from nodeagent.traylog import TrayLog

PASSING = (Step.STARTING_DAEMON, Step.WAITING_PEERS, Step.CONFIGURING)


class Reporter:
    def __init__(self, config: AgentConfig, client: PortalClient, log: TrayLog) -> None:
        self.cfg = config
        self.client = client
        self.log = log
        self.last_sent: StatusReport | None = None
        self.last_report_ok = False
        # A new agent process settles before its first report like any other: right after
        # a restart, one observation that the re-adopted daemon did not answer must not
        # tell the portal the tray stopped serving (it would degrade the domain).
        self.next_heartbeat = time.monotonic() + config.settle_s
        self.pending_step = ""
        self.pending_since = 0.0

    def doc(
        self,
        *,
        uid: str | None,
        generation: int,
        step: str,
        daemon_state: str = "",
        domain_state: str = "",
        peers: list[PeerStatus] | None = None,
        channels: list[int] | None = None,
        clean: bool = False,
        error: str = "",
        message: str = "",
    ) -> StatusReport:
        """A report in the agent's one form: every field of the contract."""
        return {
            "domain_uid": uid,
            "generation_applied": generation,
            "step": step,
            "daemon_state": daemon_state,
            "domain_state": domain_state,
            "peers": peers or [],
            "channels_present": channels or [],
            "clean": clean,
            "error": error[:2000],
            "message": message[:2000],
            "link_error": self.client.link_error,
        }

    def send(self, report: StatusReport) -> bool:
        """On every change, and as a jittered heartbeat otherwise; True when sent.

        A passing step (daemon starting, peers connecting) is reported only once it has
        lasted `settle_s`: a quick formation then costs one report per tray instead of four,
        which matters when 144 trays report to one portal at once; a slow one is still shown
        step by step. Errors, readiness and release are reported at once.
        """
        now = time.monotonic()
        # The GPUs' health rides along now and then; it is not a change of the tray's state.
        core = cast(StatusReport, {k: v for k, v in report.items() if k != "gpu_health"})
        sampled = "gpu_health" in report
        if core == self.last_sent and not sampled and now < self.next_heartbeat:
            return False
        if report["step"] != self.pending_step:
            self.pending_step, self.pending_since = report["step"], now
        passing = report["step"] in PASSING
        settling = now - self.pending_since < self.cfg.settle_s
        heartbeat_due = now >= self.next_heartbeat
        if passing and settling and not report["error"] and not heartbeat_due:
            return False
        try:
            self.client.report(report, request_id=self.log.request_id)
        except PortalError:
            self.last_report_ok = False
            raise
        if core != self.last_sent:
            self.log.info(
                "reported %s daemon=%s domain=%s%s",
                report["step"],
                report["daemon_state"] or "-",
                report["domain_state"] or "-",
                f" error={report['error']}" if report["error"] else "",
            )
        self.last_sent = core
        self.last_report_ok = True
        self.next_heartbeat = now + self.cfg.heartbeat_interval * random.uniform(0.8, 1.2)
        return True
