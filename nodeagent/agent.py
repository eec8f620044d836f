# SPDX-License-Identifier: Apache-2.0
"""The node agent: one reconcile loop per tray.

A cycle: fetch the desired state (on a websocket nudge, or every few seconds) → read what
the tray looks like → apply the difference → report, with the generation now matched.
Running a cycle twice is harmless. Signal handlers only set the stop event; every wait is
an interruptible `Event.wait`; errors back off; heartbeats carry jitter.

The loop composes the agent's parts, each one holding its own state:

- `link.PortalLink`: the node token, the nudges, the desired state, the facts;
- `trayfiles.TrayFiles`: the IMEX config, nodes file, channel devices and CDI spec, and
  the record of what was applied;
- `supervision.DaemonKeeper`: the daemon's start, restarts and re-resolves;
- `observe.Observer` and `report.Reporter`: looking at the daemon, and telling the portal;
- `serving.TrayServing`: the DRA kubelet plugin, on a Kubernetes cluster.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from agentwire.messages import DesiredDomain, StatusReport, Step
from nodeagent import metrics
from nodeagent.channels import ChannelError
from nodeagent.client import MalformedDocument, PortalError, Unauthorized
from nodeagent.config import AgentConfig
from nodeagent.driver import DriverRoot
from nodeagent.facts import FactsKeeper
from nodeagent.gpuhealth import GpuHealth
from nodeagent.imex.ctl import Ctl, CtlError
from nodeagent.imex.supervisor import Daemon, Supervisor
from nodeagent.link import MAX_BACKOFF_S, PortalLink
from nodeagent.observe import Observer
from nodeagent.report import Reporter
from nodeagent.runner import RunnerDaemon
from nodeagent.serving import TrayServing
from nodeagent.supervision import DaemonKeeper
from nodeagent.trayfiles import TrayFiles
from nodeagent.traylog import TrayLog


class FatalError(RuntimeError):
    """The agent cannot work on this host at all (e.g. mknod refused)."""


class Agent:
    def __init__(self, config: AgentConfig, *, stop: threading.Event | None = None) -> None:
        self.cfg = config
        self.paths = config.paths
        self.stop_event = stop or threading.Event()
        self.wake = threading.Event()
        self.log = TrayLog(config.hostname or "agent")
        driver = DriverRoot(config.driver_root)
        imex_bin = driver.command("nvidia-imex", config.imex_bin)
        env = driver.environment(self.paths.driver_libs)
        daemon: Supervisor = (
            RunnerDaemon(self.paths, self.log)
            if config.imex_runner
            else Daemon(imex_bin, self.paths, self.log, on_exit=self.wake.set, env=env)
        )
        ctl_bin = driver.command("nvidia-imex-ctl", config.imex_ctl_bin)
        ctl = Ctl(ctl_bin, self.paths, config.ctl_timeout, env=env)
        self.facts = FactsKeeper(config, driver, imex_bin, self.log)
        self.gpu_health = GpuHealth(driver, config.fabric_facts, config.gpu_health_interval)
        self.link = PortalLink(config, self.facts, self.log, stop=self.stop_event, wake=self.wake)
        self.reporter = Reporter(config, self.link.client, self.log)
        self.keeper = DaemonKeeper(
            config, daemon, self.facts, self.log, on_start=lambda: self.observer.daemon_started()
        )
        self.observer = Observer(config, ctl, self.keeper, self.reporter, self.log)
        self.files = TrayFiles(config, self.log)
        self.last_cycle_at = time.monotonic()
        self.started = False
        self.serving = TrayServing(
            config, self.facts, self.link.client, nudge=self.nudge, stop=self.stop_event
        )

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        backoff = 0.5
        try:
            while not self.stop_event.is_set():
                try:
                    delay = metrics.timed(self.cycle)
                    backoff = 0.5
                except FatalError:
                    raise
                except Unauthorized as exc:
                    self.link.rejoin(exc)
                    delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
                except MalformedDocument as exc:
                    self.log.error("%s; keeping what the tray holds", exc)
                    delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
                except (PortalError, CtlError, OSError) as exc:
                    self.log.warning("cycle failed: %s (retry in %.1fs)", exc, backoff)
                    delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
                self.last_cycle_at = time.monotonic()
                self.wake.wait(delay)
                self.wake.clear()
        finally:
            self.shutdown()

    def request_stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def nudge(self) -> None:
        self.link.nudge()

    def cycle(self) -> float:
        """One reconcile pass; returns how long to wait before the next one."""
        if not self.started:
            self.startup()
        self.link.ensure_joined()
        now = time.monotonic()
        self.facts.refresh(now)
        self.link.sync_facts(now)
        desired, fetched = self.link.advertised()
        self.serving.start(desired, fetched=fetched)
        want = self.link.desired_or_last(now)["domain"]
        desired, fetched = self.link.advertised()  # names the domain the tray serves now
        self.serving.publish_slice(desired, fetched=fetched)
        report, delay = self.apply(want) if want else self.release()
        metrics.observed(report)
        health = self.gpu_health.due(now)
        if health is not None:
            report["gpu_health"] = health
        if self.send_report(report) and health is not None:
            self.gpu_health.sent(now)
        return self.link.paced(delay)

    def startup(self) -> None:
        try:
            self.files.channels.check_mknod()
        except ChannelError as exc:
            raise FatalError(str(exc)) from exc
        self.log.tray = self.facts.probe().hostname
        self.facts.check_host()
        if self.keeper.daemon.adopt():
            self.log.request_id = self.files.applied.get("request_id", "")
        self.files.wipe_stale()
        self.started = True

    # --- apply a domain, or release it ------------------------------------------------------
    def apply(self, want: DesiredDomain) -> tuple[StatusReport, float]:
        uid, index = want["uid"], want["index"]
        self.log.request_id = want["request_id"]
        if self.files.applied.get("domain_uid") not in (None, uid):
            self.log.warning(
                "tray still holds domain %s; tearing it down", self.files.applied["domain_uid"]
            )
            self.teardown()
        now = time.monotonic()
        error = self.configure(want, now)
        hold = self.keeper.gather_hold(want, now)
        if hold and not error:
            report = self.reporter.doc(
                uid=uid,
                generation=want["generation"],
                step=Step.CONFIGURING,
                channels=self.files.present,
                message="gathering the trays that join with this one before nvidia-imex starts",
            )
            return report, hold
        error = self.keeper.keep_running(uid, now, error)
        report, delay = self.observer.observe(want, index, self.files.present, error)
        self.serving.serve(want, report["daemon_state"], self.files.present, self.files.major)
        return report, self.keeper.paced(want, report, delay)

    def configure(self, want: DesiredDomain, now: float) -> str:
        """The tray's files for `want`, checked when the desired state changes and once per
        poll interval (repairing drift), not on every fast readiness poll; and what that asks
        of the daemon, told to its keeper. Returns what went wrong."""
        checked = self.files.check(want, now, driver_version=self.facts.driver_version())
        if checked is None:
            return ""
        if checked.restart and self.keeper.daemon.running():
            self.log.info("IMEX peers or addresses changed; restarting nvidia-imex")
            self.keeper.daemon.stop(self.cfg.stop_timeout)
        if checked.hosts is not None:
            self.keeper.follow_peers(checked.hosts, settling=checked.settling)
        return checked.error

    def release(self) -> tuple[StatusReport, float]:
        self.serving.set(None)
        uid = self.files.applied.get("domain_uid")
        if uid or self.files.dirty(daemon_running=self.keeper.daemon.running()):
            self.log.info("releasing: stopping nvidia-imex, removing channels, CDI spec, config")
            self.teardown()
        report = self.reporter.doc(
            uid=uid,
            generation=int(self.files.applied.get("generation", 0)),
            step=Step.IDLE,
            channels=[],
            clean=not self.files.dirty(daemon_running=self.keeper.daemon.running()),
            message="tray clean" if uid else "",
        )
        return report, self.cfg.poll_interval

    def teardown(self) -> None:
        self.observer.daemon_ready = False
        self.keeper.stop()
        self.files.remove_all()
        self.keeper.daemon.set_hosts({})

    def send_report(self, report: StatusReport) -> bool:
        sent = self.reporter.send(report)
        if sent and report["clean"] and report["domain_uid"]:
            # The portal has heard that this domain is gone from the tray; forget it.
            self.files.forget()
            self.log.request_id = ""
        return sent

    # --- stop -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """The agent stopping is not a decision to stop the daemon: it is left running for
        the next agent process to re-adopt (the emulator's fleet alone may ask otherwise)."""
        self.stop_event.set()
        self.serving.stop()
        self.gpu_health.close()
        if self.cfg.stop_daemon_on_exit:
            with contextlib.suppress(Exception):
                self.keeper.daemon.stop(self.cfg.stop_timeout)
        self.link.close()

    def health(self) -> dict[str, Any]:
        sent = self.reporter.last_sent
        return {
            "tray": self.log.tray,
            "alive": time.monotonic() - self.last_cycle_at < max(60.0, 3 * self.cfg.poll_interval),
            "ready": bool(self.link.client.token) and self.reporter.last_report_ok,
            "domain": self.files.applied.get("domain_uid"),
            "step": sent["step"] if sent else "",
            "conditions": [c["type"] for c in self.facts.conditions()],
        }
