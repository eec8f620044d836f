# SPDX-License-Identifier: Apache-2.0
"""The node agent: one reconcile loop per tray.

A cycle: fetch the desired state (on a websocket nudge, or every few seconds) → read what
the tray looks like → apply the difference → report, with the generation now matched.
Running a cycle twice is harmless. Signal handlers only set the stop event; every wait is
an interruptible `Event.wait`; errors back off; heartbeats carry jitter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import threading
import time
from collections.abc import MutableMapping
from typing import Any

from agentwire.messages import (
    ChannelSpec,
    DesiredDomain,
    DesiredState,
    PeerStatus,
    StatusReport,
    Step,
)
from nodeagent import imex, metrics
from nodeagent.channels import ChannelError, Channels, cdi_spec, channel_numbers, remove_cdi
from nodeagent.client import MalformedDocument, Nudger, PortalClient, PortalError, Unauthorized
from nodeagent.config import AgentConfig
from nodeagent.dra.claims import Serving
from nodeagent.dra.plugin import DraPlugin, PluginConfig
from nodeagent.dra.slices import scheduling
from nodeagent.driver import CapabilityError, DriverRoot, ensure_imex_mgmt
from nodeagent.facts import FactsKeeper
from nodeagent.files import read_json, remove, write_atomic
from nodeagent.host import foreign_daemons
from nodeagent.probe import channel_major
from nodeagent.runner import RunnerDaemon

logger = logging.getLogger("nodeagent")


STARTING_STATES = {"", "UNAVAILABLE", "INITIALIZING", "STARTING_AUTH_SERVER"}
MISMATCHES = {"NODE_MAP_MISMATCH": "node map", "VERSION_MISMATCH": "version"}
# Retries back off, but stay well under the portal's heartbeat staleness (30 s by default):
# a cycle that fails for a local reason must not make a healthy member look lost.
MAX_BACKOFF_S = 10.0
# nvidia-imex processes at most one SIGUSR1 every 5 s (NVIDIA's IMEX guide, "Signal
# handling"); the agent asks for them spaced by a little more (see imex.USR1_SPACING_S).
USR1_SPACING_S = imex.USR1_SPACING_S
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


class TrayLog(logging.LoggerAdapter[logging.Logger]):
    """Every line names the tray and the request id of the domain it is working for."""

    def __init__(self, tray: str) -> None:
        super().__init__(logger, {})
        self.tray = tray
        self.request_id = ""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        return f"{self.tray} [{self.request_id or '-'}] {msg}", kwargs


class FatalError(RuntimeError):
    """The agent cannot work on this host at all (e.g. mknod refused)."""


class Agent:
    def __init__(self, config: AgentConfig, *, stop: threading.Event | None = None) -> None:
        self.cfg = config
        self.paths = config.paths
        self.stop_event = stop or threading.Event()
        self.wake = threading.Event()
        self.log = TrayLog(config.hostname or "agent")
        self.client = PortalClient(config.portal)
        self.driver = DriverRoot(config.driver_root)
        self.imex_bin = self.driver.command("nvidia-imex", config.imex_bin)
        env = self.driver.environment(self.paths.driver_libs)
        self.daemon: imex.Supervisor = (
            RunnerDaemon(self.paths, self.log)
            if config.imex_runner
            else imex.Daemon(self.imex_bin, self.paths, self.log, on_exit=self.wake.set, env=env)
        )
        ctl_bin = self.driver.command("nvidia-imex-ctl", config.imex_ctl_bin)
        self.ctl = imex.Ctl(ctl_bin, self.paths, config.ctl_timeout, env=env)
        self.channels = Channels(
            self.paths.channels_dir,
            mode=config.channel_mode,
            gid=config.channel_gid,
            emulated_files=config.emulated_channel_files,
        )
        self.applied: dict[str, Any] = read_json(self.paths.applied) or {}
        self.facts = FactsKeeper(config, self.driver, self.imex_bin, self.log)
        self.nudger: Nudger | None = None
        self.desired: DesiredState | None = None
        self.nudged = True
        self.next_fetch = 0.0
        self.link_retry = 0.0  # backoff of a failed desired-state fetch (0: none failed)
        self.facts_retry_at = self.facts_backoff = 0.0  # of facts the portal did not take
        self.last_sent: StatusReport | None = None
        # A new agent process settles before its first report like any other: right after
        # a restart, one observation that the re-adopted daemon did not answer must not
        # tell the portal the tray stopped serving (it would degrade the domain).
        self.next_heartbeat = time.monotonic() + config.settle_s
        self.wait_started = 0.0
        self.restart_at = 0.0  # when an exited daemon is started again
        self.restart_delay = 0.0
        self.next_health_check = 0.0
        self.start_poll = config.start_poll_interval
        self.ready_poll = config.ready_poll_interval
        self.last_view: tuple[str, imex.DomainHealth | None] = ("", None)  # while waiting
        self.daemon_ready = False  # the daemon said READY at the last look (see observe)
        self.last_cycle_at = time.monotonic()
        self.last_report_ok = False
        self.started = False
        self.pending_step = ""
        self.pending_since = 0.0
        self.files_want: DesiredDomain | None = None  # applied to the files, unchanged since
        self.files_checked_at = 0.0
        self.present: list[int] = []
        self.major: int | None = None
        self.usr1_at = -USR1_SPACING_S  # when the daemon was last told to re-resolve
        self.resolve_due = 0.0  # when to tell it next (0: nothing pending)
        self.resolve_since = 0.0  # when the first change not yet signalled was written
        self.hosts_map: dict[int, str] = {}  # slot → IP, as last written to the hosts file
        self.gather: tuple[str, float] = ("", 0.0)  # (domain uid, first seen) before a start
        # What the tray serves, as last observed, for the DRA plugin's gRPC threads.
        self.serving: Serving | None = None
        self.serving_changed = threading.Condition()
        self.dra = self._dra_plugin()

    def _dra_plugin(self) -> DraPlugin | None:
        if self.cfg.kubelet_dir is None:
            return None
        config = PluginConfig(
            kubelet_dir=self.cfg.kubelet_dir,
            kubeconfig=self.cfg.kubeconfig,
            cdi_dir=self.paths.cdi_run_dir,
            state_dir=self.paths.state_dir,
            prepare_wait_s=self.cfg.prepare_wait_s,
            boot_id_file=self.paths.boot_id,
        )
        name = self.cfg.hostname or self.facts.probe().hostname
        return DraPlugin(
            config, node_name=name, root=self.paths.root, client=self.client, tray=self
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
                    self.log.warning("node token refused (%s); joining again", exc)
                    self.client.token = ""
                    remove(self.paths.credentials)
                    delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
                except MalformedDocument as exc:
                    self.log.error("%s; keeping what the tray holds", exc)
                    delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
                except (PortalError, imex.CtlError, OSError) as exc:
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
        self.nudged = True
        self.wake.set()

    def cycle(self) -> float:
        """One reconcile pass; returns how long to wait before the next one."""
        if not self.started:
            self.startup()
        self.ensure_joined()
        now = time.monotonic()
        self.facts.refresh(now)
        self.sync_facts(now)
        if self.dra is not None:
            self.dra.start()  # once joined: admitting a claim needs the node token
            self.publish_slice()  # first with the domain last known: the portal may be away
            self.dra.drop_stale_claims()
        want = self.desired_or_last(now)["domain"]
        self.publish_slice()  # the slice names the domain the tray serves now
        report, delay = self.apply(want) if want else self.release()
        metrics.observed(report)
        self.send_report(report)
        return min(delay, self.link_retry) if self.link_retry else delay

    def publish_slice(self) -> None:
        if self.dra is not None:
            domain, eligible = scheduling(self.desired)
            self.dra.publish_slice(dict(self.facts.document()), domain, eligible=eligible)

    def desired_or_last(self, now: float) -> DesiredState:
        """The desired state; when its fetch fails, the last one fetched (the tray keeps what
        it holds, and its report says why it could not look: the portal hears of a tray it
        cannot serve instead of taking it for lost). None fetched yet: the cycle fails."""
        try:
            desired = self.fetch_desired(now)
        except Unauthorized:
            raise
        except PortalError as exc:
            if self.desired is None:
                raise
            self.link_retry = min(max(self.link_retry * 2, 0.5), MAX_BACKOFF_S)
            log = self.log.error if isinstance(exc, MalformedDocument) else self.log.warning
            log("%s; keeping what the tray holds (retry in %.1fs)", exc, self.link_retry)
            return self.desired
        self.link_retry = 0.0
        return desired

    def fetch_desired(self, now: float) -> DesiredState:
        """Fetch the desired state when nudged, when the poll interval is up, or at start.

        A nudge stays owed until a fetch succeeds: one whose fetch fails (the portal busy or
        restarting, a connection dropped) is fetched again on the next cycle, after the
        cycle's backoff, not a poll interval later. A nudge that arrives during the fetch is
        kept for the next cycle."""
        if self.desired is not None and not self.nudged and now < self.next_fetch:
            return self.desired
        self.nudged = False
        try:
            self.desired = self.client.desired()
        except PortalError:
            self.nudged = True
            raise
        self.log.debug("fetched desired state")
        self.next_fetch = now + self.cfg.poll_interval * random.uniform(0.8, 1.2)
        return self.desired

    # --- start, join, facts -------------------------------------------------------------------
    def startup(self) -> None:
        try:
            self.channels.check_mknod()
        except ChannelError as exc:
            raise FatalError(str(exc)) from exc
        self.log.tray = self.facts.probe().hostname
        self.facts.check_host()
        if self.daemon.adopt():
            self.log.request_id = self.applied.get("request_id", "")
        keep = set(channel_numbers(self.applied.get("channels"))) if self.applied else set()
        stale = [n for n in self.channels.present() if n not in keep]
        for number in stale:
            remove(self.paths.channels_dir / f"channel{number}")
        if stale:
            self.log.info("wiped %d stale channel device(s) at start", len(stale))
        if not self.applied.get("domain_uid"):
            remove_cdi(self.paths.cdi_spec)
        self.started = True

    def ensure_joined(self) -> None:
        if self.client.token:
            return
        saved = read_json(self.paths.credentials)
        if saved and saved.get("portal") == self.cfg.portal and saved.get("token"):
            self.client.use(int(saved["node_id"]), saved["token"])
        else:
            node_id, token = self.client.join(self.facts.document(), **self.join_credential())
            self.client.use(node_id, token)
            write_atomic(
                self.paths.credentials,
                _json({"portal": self.cfg.portal, "node_id": node_id, "token": token}),
                mode=0o600,
            )
            self.log.info("joined the portal as node %s", node_id)
        # A join of a tray the portal knows does not change its facts: they are (re-)sent
        # under the node token, after every start and every join.
        self.facts.sent = None
        if self.cfg.websocket and (self.nudger is None or not self.nudger.is_alive()):
            self.nudger = Nudger(self.client, self.nudge, self.stop_event, self.log)
            self.nudger.start()

    def join_credential(self) -> dict[str, str]:
        """What the agent joins with: the pod's service-account token when configured, read
        now (the kubelet rotates the file well before the token expires), else the join
        token. An unreadable or empty file is an OSError: the cycle backs off and retries."""
        path = self.cfg.service_account_token_file
        if path is None:
            return {"join_token": self.cfg.join_token}
        token = path.read_bytes().decode("ascii", errors="replace").strip()
        if not token:
            raise OSError(f"service-account token file {path} is empty")
        return {"service_account_token": token}

    def sync_facts(self, now: float) -> None:
        """Re-register the tray's facts and conditions when they differ from what was sent.

        A refused or failed send is tried again with backoff; the cycle goes on meanwhile,
        and its report carries the failure (`link_error`)."""
        document = self.facts.changed()
        if document is None or now < self.facts_retry_at:
            return
        try:
            self.client.update_facts(document)
        except Unauthorized:
            raise
        except PortalError as exc:
            self.facts_backoff = min(max(self.facts_backoff * 2, 0.5), MAX_BACKOFF_S)
            self.facts_retry_at = now + self.facts_backoff
            self.log.warning("facts not sent: %s (retry in %.1fs)", exc, self.facts_backoff)
            return
        self.facts_backoff = self.facts_retry_at = 0.0
        self.facts.accepted(document)

    # --- apply a domain -----------------------------------------------------------------------
    def apply(self, want: DesiredDomain) -> tuple[StatusReport, float]:
        uid, index = want["uid"], want["index"]
        self.log.request_id = want["request_id"]
        if self.applied.get("domain_uid") not in (None, uid):
            self.log.warning(
                "tray still holds domain %s; tearing it down", self.applied["domain_uid"]
            )
            self.teardown()
        now = time.monotonic()
        error = ""
        if want != self.files_want or now - self.files_checked_at >= self.cfg.poll_interval:
            # Files and devices are checked when the desired state changes and once per poll
            # interval (repairing drift), not on every fast readiness poll.
            self.present, error = self.apply_files(want)
            self.files_want, self.files_checked_at = (None if error else want), now
        hold = self.gather_hold(want, now)
        if hold and not error:
            report = self.report_doc(
                uid=uid,
                generation=want["generation"],
                step=Step.CONFIGURING,
                channels=self.present,
                message="gathering the trays that join with this one before nvidia-imex starts",
            )
            return report, hold
        if not self.daemon.running():
            error = error or self.start_daemon()
            if self.daemon.running():
                self.resolve_due = self.resolve_since = 0.0  # it resolves every name at start
                self.gather = (uid, -math.inf)  # gathered once: a restart holds nothing
        elif self.resolve_due and now >= self.resolve_due:
            self.re_resolve()
        report, delay = self.observe(want, index, self.present, error)
        if want.get("slots") and not self.resolve_due and self.unresolved(report):
            # Level-triggered: a member this daemon has never reached although the hosts
            # file names it (a SIGUSR1 the daemon ignored as too soon, one lost in a busy
            # moment) is asked for again once 5 s have passed since the daemon's start and
            # since the last SIGUSR1.
            self.resolve_due = max(self.usr1_at, self.wait_started) + USR1_SPACING_S
        if self.resolve_due:
            delay = min(delay, max(self.resolve_due - time.monotonic(), 0.01))
        return report, delay

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

    @staticmethod
    def unresolved(report: StatusReport) -> bool:
        return report["daemon_state"] == "READY" and any(
            p["status"] == "NEVER_CONNECTED" for p in report["peers"]
        )

    def re_resolve(self) -> None:
        """Have the daemon re-read its hosts file: its parent sends it SIGUSR1 (processed at
        most every 5 s, so the agent spaces them; one that came too soon would be ignored
        and the change missed). The agent never signals a daemon of another PID namespace."""
        if self.daemon.pid is None:
            return
        self.daemon.resolve()
        self.log.info("IMEX peers changed; nvidia-imex told to re-resolve (SIGUSR1)")
        self.usr1_at, self.resolve_due, self.resolve_since = time.monotonic(), 0.0, 0.0

    def resolve_later(self, *, gained: bool, settling: bool) -> None:
        """One SIGUSR1 for the names that got a new address, once the burst is over."""
        now = time.monotonic()
        if gained:
            self.resolve_since = self.resolve_since or now
        elif not self.resolve_since:
            return  # nothing waits for a re-resolve
        due = self.resolve_since + RESOLVE_MAX_S if settling else now + RESOLVE_QUIET_S
        due = min(due, self.resolve_since + RESOLVE_MAX_S)
        self.resolve_due = max(due, self.usr1_at + USR1_SPACING_S)

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
                    f"nvidia-imex exited ({imex.describe_exit(code)}); starting it again in "
                    f"{self.restart_delay:.0f} s" + self.daemon_log_tail()
                )
        tail = self.daemon_log_tail() if code is not None else ""  # before it logs anew
        self.daemon.start()
        self.daemon_ready = False
        self.wait_started, self.restart_at = now, 0.0
        self.start_poll = self.cfg.start_poll_interval
        if code is None:
            return ""
        metrics.daemon_restarted()
        return f"nvidia-imex exited ({imex.describe_exit(code)}); restarted it" + tail

    def daemon_log_tail(self) -> str:
        """The last lines of the daemon's log, after a newline, for an error that says it
        exited: the cause is there (the portal's tray page shows them)."""
        lines = imex.log_tail(self.paths.daemon_log)
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

    def apply_files(self, want: DesiredDomain) -> tuple[list[int], str]:
        """IMEX config + nodes file, channel devices, CDI spec → (channels present, error)."""
        peers = sorted(want["peers"], key=lambda p: p["index"])
        own = next((p["ip"] for p in peers if p["index"] == want["index"]), "")
        config = imex.render_config(
            paths=self.paths,
            bind_ip=own,
            server_port=want["imex"]["server_port"],
            cmd_port=want["imex"]["cmd_port"],
            grace_time=self.cfg.imex_grace_time,
            log_level=self.cfg.imex_log_level,
        )
        if want.get("slots"):
            # Follows its workload: stable names; a new peer list is a hosts change and a
            # SIGUSR1, never a restart of this daemon.
            unsupported = imex.names_unsupported(
                self.facts.facts.driver_version if self.facts.facts else ""
            )
            if unsupported:
                return [], unsupported
            if want["index"] >= imex.MAX_NODES:
                return [], (
                    f"this tray is member {want['index']} of a domain that follows its "
                    f"workload, whose nodes file lists {imex.MAX_NODES} names (0 to "
                    f"{imex.MAX_NODES - 1})"
                )
            nodes = imex.render_names()
            mapping = {p["index"]: p["ip"] for p in peers}
            self.daemon.set_peers(mapping)  # into the hosts file the daemon reads
            gained = any(self.hosts_map.get(i) != ip for i, ip in mapping.items())
            self.hosts_map = mapping
            if self.daemon.running():
                # A name that left needs nothing (its daemon said goodbye); a new one is
                # re-resolved once per burst. A daemon not started yet reads it at start.
                self.resolve_later(gained=gained, settling=bool(want.get("settling")))
        else:
            nodes = imex.render_nodes([p["ip"] for p in peers])
        restart = imex.write_config(paths=self.paths, config=config, nodes=nodes)
        if restart and self.daemon.running():
            # The daemon reads its config only at start: a new peer list needs a new instance.
            self.log.info("IMEX peers or addresses changed; restarting nvidia-imex")
            self.daemon.stop(self.cfg.stop_timeout)
        present, error = self.ensure_channels(want["channels"], want["uid"])
        if (
            self.applied.get("domain_uid") != want["uid"]
            or self.applied.get("generation") != want["generation"]
        ):
            self.save_applied(want)
        return present, error

    def ensure_channels(self, spec: ChannelSpec, uid: str) -> tuple[list[int], str]:
        major = self.major = channel_major(self.paths.proc_devices)
        if major is None:
            return [], f"no nvidia-caps-imex-channels line in {self.paths.proc_devices}"
        numbers = channel_numbers(spec)
        present = self.channels.ensure(numbers, major)
        text = cdi_spec(
            numbers=numbers,
            major=major,
            root=self.paths.root,
            domain_uid=uid,
            mode=spec["mode"],
            file_mode=self.cfg.channel_mode,
            gid=self.cfg.channel_gid,
        )
        write_atomic(self.paths.cdi_spec, text, durable=False)
        return present, ""

    def observe(
        self, want: DesiredDomain, index: int, present: list[int], error: str
    ) -> tuple[StatusReport, float]:
        """Read the daemon's state (and the domain's when it matters) into a report."""
        now = time.monotonic()
        state, health = "", None
        if self.daemon_ready:
            # One call where it would be two: a READY daemon's `-N -j` row for this node
            # carries the word `-q` prints. Anything but READY there is checked with `-q`.
            with contextlib.suppress(imex.CtlError):  # -q says what went wrong
                health = self.ctl.domain(index)
            state = "READY" if health and health.own_state == "READY" else ""
        if not state:
            own = next((p["ip"] for p in want["peers"] if p["index"] == index), "")
            listening = not own or imex.accepts(own, want["imex"]["cmd_port"])
            state = self.ctl.query() if listening else ""
        waited = now - self.wait_started
        if health is None and (
            state == "READY" or (state and now >= self.next_health_check and waited > 1.0)
        ):
            health = self.ctl.domain(index)
            self.next_health_check = now + 1.0
        self.daemon_ready = state == "READY"
        if health is not None and want.get("slots"):
            health = members_only(health, want)
        self.log.debug("observed daemon=%s domain=%s", state, health.state if health else "-")
        self.set_serving(
            Serving(
                domain_uid=want["uid"],
                daemon_state=state,
                channels=list(present),
                major=self.major,
                mode=want["channels"]["mode"],
                file_mode=self.cfg.channel_mode,
                gid=self.cfg.channel_gid,
            )
        )
        if state == "READY" and health and health.state == "UP" and not error:
            # A domain that stays up is looked at less and less often (each look is a `-N`
            # across every member's daemon); any other observation starts again from 2 s.
            step, delay, message = Step.READY, self.ready_poll, "IMEX domain UP"
            self.ready_poll = min(self.ready_poll * 2, self.cfg.ready_poll_max)
        else:
            self.ready_poll = self.cfg.ready_poll_interval
            step = Step.STARTING_DAEMON if state in STARTING_STATES else Step.WAITING_PEERS
            # Back off from fast polling: quick when formation is quick, cheap when it is not.
            # Up to 0.2 s while the daemon starts or peers keep connecting; up to 0.5 s while
            # a READY daemon's view stays the same (peers whose daemons have not started:
            # each look is a `-N` across every member that is up).
            seen_state, seen_health = self.last_view
            changed = state != seen_state or (health is not None and health != seen_health)
            self.last_view = (state, health or seen_health)
            if changed:
                self.start_poll = min(self.start_poll, 0.1)
            delay = self.start_poll
            cap = 0.5 if state == "READY" and not changed else 0.2
            self.start_poll = min(self.start_poll * 1.4, cap)
            message, mismatch = self.describe_wait(state, health)
            error = error or mismatch
        report = self.report_doc(
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

    @staticmethod
    def describe_wait(state: str, health: imex.DomainHealth | None) -> tuple[str, str]:
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

    # --- what the DRA plugin asks -------------------------------------------------------------
    def set_serving(self, serving: Serving | None) -> None:
        if serving == self.serving:
            return
        with self.serving_changed:
            self.serving = serving
            self.serving_changed.notify_all()

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving | None:
        """What the tray serves for `domain_uid` once its daemon is READY with channels, or
        as it is after `timeout` (None when it does not serve that domain)."""

        def ready() -> bool:
            s = self.serving
            return self.stop_event.is_set() or bool(
                s and s.domain_uid == domain_uid and s.daemon_state == "READY" and s.channels
            )

        with self.serving_changed:
            self.serving_changed.wait_for(ready, timeout)
            current = self.serving
        return current if current and current.domain_uid == domain_uid else None

    # --- release ----------------------------------------------------------------------------
    def release(self) -> tuple[StatusReport, float]:
        self.set_serving(None)
        uid = self.applied.get("domain_uid")
        if uid or self.dirty():
            self.log.info("releasing: stopping nvidia-imex, removing channels, CDI spec, config")
            self.teardown()
        report = self.report_doc(
            uid=uid,
            generation=int(self.applied.get("generation", 0)),
            step=Step.IDLE,
            channels=[],
            clean=not self.dirty(),
            message="tray clean" if uid else "",
        )
        return report, self.cfg.poll_interval

    def dirty(self) -> bool:
        return bool(
            self.daemon.running()
            or self.paths.imex_config.exists()
            or self.paths.nodes_file.exists()
            or self.paths.cdi_spec.exists()
            or self.channels.present()
        )

    def teardown(self) -> None:
        self.files_want = None
        self.daemon_ready = False
        self.restart_at = self.restart_delay = 0.0
        self.resolve_due = self.resolve_since = 0.0
        self.hosts_map = {}
        self.daemon.stop(self.cfg.stop_timeout)
        self.channels.remove_all()
        remove_cdi(self.paths.cdi_spec)
        imex.remove_config(self.paths)
        self.daemon.set_peers({})

    def save_applied(self, want: DesiredDomain) -> None:
        self.applied = {
            "domain_uid": want["uid"],
            "generation": want["generation"],
            "request_id": want["request_id"],
            "channels": want["channels"],
        }
        # No fsync: after a power loss nothing applied survives (the daemon, the /dev nodes),
        # and a torn record reads as none, which makes the agent clean up what is left.
        write_atomic(self.paths.applied, _json(self.applied), durable=False)

    # --- reporting --------------------------------------------------------------------------
    def report_doc(
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

    def send_report(self, report: StatusReport) -> None:
        """On every change, and as a jittered heartbeat otherwise.

        A passing step (daemon starting, peers connecting) is reported only once it has
        lasted `settle_s`: a quick formation then costs one report per tray instead of four,
        which matters when 144 trays report to one portal at once; a slow one is still shown
        step by step. Errors, readiness and release are reported at once.
        """
        now = time.monotonic()
        if report == self.last_sent and now < self.next_heartbeat:
            return
        if report["step"] != self.pending_step:
            self.pending_step, self.pending_since = report["step"], now
        passing = report["step"] in (Step.STARTING_DAEMON, Step.WAITING_PEERS, Step.CONFIGURING)
        settling = now - self.pending_since < self.cfg.settle_s
        heartbeat_due = now >= self.next_heartbeat
        if passing and settling and not report["error"] and not heartbeat_due:
            return
        try:
            self.client.report(report, request_id=self.log.request_id)
        except PortalError:
            self.last_report_ok = False
            raise
        if report != self.last_sent:
            self.log.info(
                "reported %s daemon=%s domain=%s%s",
                report["step"],
                report["daemon_state"] or "-",
                report["domain_state"] or "-",
                f" error={report['error']}" if report["error"] else "",
            )
        self.last_sent = report
        self.last_report_ok = True
        self.next_heartbeat = now + self.cfg.heartbeat_interval * random.uniform(0.8, 1.2)
        if report["clean"] and report["domain_uid"]:
            # The portal has heard that this domain is gone from the tray; forget it.
            self.applied = {}
            remove(self.paths.applied)
            self.log.request_id = ""

    # --- stop -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """The agent stopping is not a decision to stop the daemon: it is left running for
        the next agent process to re-adopt (the emulator's fleet alone may ask otherwise)."""
        self.stop_event.set()
        with self.serving_changed:  # a prepare waiting for the daemon answers now
            self.serving_changed.notify_all()
        if self.dra is not None:
            with contextlib.suppress(Exception):
                self.dra.stop()
        if self.cfg.stop_daemon_on_exit:
            with contextlib.suppress(Exception):
                self.daemon.stop(self.cfg.stop_timeout)
        self.client.close()

    def health(self) -> dict[str, Any]:
        return {
            "tray": self.log.tray,
            "alive": time.monotonic() - self.last_cycle_at < max(60.0, 3 * self.cfg.poll_interval),
            "ready": bool(self.client.token) and self.last_report_ok,
            "domain": self.applied.get("domain_uid"),
            "step": self.last_sent["step"] if self.last_sent else "",
            "conditions": [c["type"] for c in self.facts.conditions()],
        }


def members_only(health: imex.DomainHealth, want: DesiredDomain) -> imex.DomainHealth:
    """A domain that follows its workload lists a name per slot; the slots no member holds
    never answer, so the daemon calls the domain DEGRADED for good. What matters is the
    members: UP when this tray is connected to every other member."""
    members = {p["index"] for p in want["peers"]} - {want["index"]}
    peers = [p for p in health.peers if p["index"] in members]
    state = health.state
    if state in ("UP", "DEGRADED") and all(p["status"] == "CONNECTED" for p in peers):
        state = "UP" if len(peers) == len(members) else "DEGRADED"
    return imex.DomainHealth(state=state, peers=peers, own_state=health.own_state)


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
