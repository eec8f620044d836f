# SPDX-License-Identifier: Apache-2.0
"""The node agent: one reconcile loop per tray (STYLE.md "Node agent").

A cycle: fetch the desired state (on a websocket nudge, or every few seconds) → read what
the tray looks like → apply the difference → report, with the generation now matched.
Running a cycle twice is harmless. Signal handlers only set the stop event; every wait is
an interruptible `Event.wait`; errors back off; heartbeats carry jitter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from typing import Any

from nodeagent import imex
from nodeagent.channels import ChannelError, Channels, cdi_spec, channel_numbers, remove_cdi
from nodeagent.client import Nudger, PortalClient, PortalError, Unauthorized
from nodeagent.config import AGENT_VERSION, AgentConfig
from nodeagent.fabric import Facts, ProbeError, channel_major, probe
from nodeagent.files import read_json, remove, write_atomic

logger = logging.getLogger("nodeagent")


class Step:
    """Mirrors `domains.agents.report.Step` (the portal's side of the contract)."""

    IDLE = "idle"
    CONFIGURING = "configuring"
    STARTING_DAEMON = "starting_daemon"
    WAITING_PEERS = "waiting_peers"
    READY = "ready"
    RELEASING = "releasing"
    FAILED = "failed"


STARTING_STATES = {"", "UNAVAILABLE", "INITIALIZING", "STARTING_AUTH_SERVER"}
MISMATCHES = {"NODE_MAP_MISMATCH": "node map", "VERSION_MISMATCH": "version"}
# Retries back off, but stay well under the portal's heartbeat staleness (30 s by default):
# a cycle that fails for a local reason must not make a healthy member look lost.
MAX_BACKOFF_S = 10.0


class TrayLog(logging.LoggerAdapter):
    """Every line names the tray and the request id of the domain it is working for."""

    def __init__(self, tray: str) -> None:
        super().__init__(logger, {})
        self.tray = tray
        self.request_id = ""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
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
        self.daemon = imex.Daemon(config.imex_bin, self.paths, self.log, on_exit=self.wake.set)
        self.ctl = imex.Ctl(config.imex_ctl_bin, self.paths, config.ctl_timeout)
        self.channels = Channels(
            self.paths.channels_dir, emulated_files=config.emulated_channel_files
        )
        self.applied: dict[str, Any] = read_json(self.paths.applied) or {}
        self.facts: Facts | None = None
        self.nudger: Nudger | None = None
        self.desired: dict[str, Any] | None = None
        self.nudged = True
        self.next_fetch = 0.0
        self.last_sent: dict[str, Any] | None = None
        self.next_heartbeat = 0.0
        self.wait_started = 0.0
        self.next_health_check = 0.0
        self.start_poll = config.start_poll_interval
        self.last_cycle_at = time.monotonic()
        self.last_report_ok = False
        self.started = False
        self.pending_step = ""
        self.pending_since = 0.0
        self.files_key = ""
        self.files_checked_at = 0.0
        self.present: list[int] = []

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        backoff = 0.5
        try:
            while not self.stop_event.is_set():
                try:
                    delay = self.cycle()
                    backoff = 0.5
                except FatalError:
                    raise
                except Unauthorized as exc:
                    self.log.warning("node token refused (%s); joining again", exc)
                    self.client.token = ""
                    remove(self.paths.credentials)
                    delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
                except (PortalError, ProbeError, imex.CtlError, OSError) as exc:
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
        if self.nudged or now >= self.next_fetch or self.desired is None:
            self.nudged = False
            self.desired = self.client.desired()
            self.log.debug("fetched desired state")
            self.next_fetch = now + self.cfg.poll_interval * random.uniform(0.8, 1.2)
        want = self.desired.get("domain")
        report, delay = self.apply(want) if want else self.release()
        self.send_report(report)
        return delay

    # --- start, join ------------------------------------------------------------------------
    def startup(self) -> None:
        try:
            self.channels.check_mknod()
        except ChannelError as exc:
            raise FatalError(str(exc)) from exc
        self.facts = probe(
            proc_devices=self.paths.proc_devices,
            hostname=self.cfg.hostname,
            ip=self.cfg.ip,
            facts_file=self.cfg.fabric_facts,
        )
        self.log.tray = self.facts.hostname
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
            assert self.facts is not None
            facts = self.facts.as_dict() | {"agent_version": AGENT_VERSION}
            node_id, token = self.client.join(self.cfg.join_token, facts)
            self.client.use(node_id, token)
            write_atomic(
                self.paths.credentials,
                _json({"portal": self.cfg.portal, "node_id": node_id, "token": token}),
                mode=0o600,
            )
            self.log.info("joined the portal as node %s", node_id)
        if self.cfg.websocket and (self.nudger is None or not self.nudger.is_alive()):
            self.nudger = Nudger(self.client, self.nudge, self.stop_event, self.log)
            self.nudger.start()

    # --- apply a domain -----------------------------------------------------------------------
    def apply(self, want: dict[str, Any]) -> tuple[dict[str, Any], float]:
        uid, index = str(want["uid"]), int(want["index"])
        self.log.request_id = want.get("request_id", "")
        if self.applied.get("domain_uid") not in (None, uid):
            self.log.warning(
                "tray still holds domain %s; tearing it down", self.applied["domain_uid"]
            )
            self.teardown()
        now = time.monotonic()
        key = json.dumps(want, sort_keys=True)
        if key != self.files_key or now - self.files_checked_at >= self.cfg.poll_interval:
            # Files and devices are checked when the desired state changes and once per poll
            # interval (repairing drift), not on every fast readiness poll.
            self.present = self.apply_files(want, uid, index)
            self.files_key, self.files_checked_at = key, now
        error = ""
        if not self.daemon.running():
            if self.daemon.exit_code is not None:
                error = f"nvidia-imex exited ({self.daemon.describe_exit()}); restarted it"
            self.daemon.start()
            self.wait_started = time.monotonic()
            self.start_poll = self.cfg.start_poll_interval
        return self.observe(want, index, self.present, error)

    def apply_files(self, want: dict[str, Any], uid: str, index: int) -> list[int]:
        """IMEX config + nodes file, channel devices, CDI spec; returns channels present."""
        peers = [p["ip"] for p in sorted(want["peers"], key=lambda p: int(p["index"]))]
        config = imex.render_config(
            paths=self.paths,
            bind_ip=peers[index],
            server_port=int(want["imex"]["server_port"]),
            cmd_port=int(want["imex"]["cmd_port"]),
        )
        changed = imex.write_config(paths=self.paths, config=config, nodes=imex.render_nodes(peers))
        if changed and self.daemon.running():
            # The daemon reads its config only at start: a new peer list needs a new instance.
            self.log.info("IMEX config changed; restarting nvidia-imex")
            self.daemon.stop(self.cfg.stop_timeout)
        present = self.ensure_channels(want, uid)
        if (
            self.applied.get("domain_uid") != uid
            or self.applied.get("generation") != want["generation"]
        ):
            self.save_applied(uid, int(want["generation"]), want)
        return present

    def ensure_channels(self, want: dict[str, Any], uid: str) -> list[int]:
        major = channel_major(self.paths.proc_devices)
        if major is None:
            raise ProbeError(f"no nvidia-caps-imex-channels line in {self.paths.proc_devices}")
        numbers = channel_numbers(want.get("channels"))
        present = self.channels.ensure(numbers, major)
        mode = (want.get("channels") or {}).get("mode", "Single")
        spec = cdi_spec(
            numbers=numbers, major=major, root=self.paths.root, domain_uid=uid, mode=mode
        )
        write_atomic(self.paths.cdi_spec, spec)
        return present

    def observe(
        self, want: dict[str, Any], index: int, present: list[int], error: str
    ) -> tuple[dict[str, Any], float]:
        """Read the daemon's state (and the domain's when it matters) into a report."""
        now = time.monotonic()
        state = self.ctl.query()
        waited = now - self.wait_started
        health: imex.DomainHealth | None = None
        if state == "READY" or (state and now >= self.next_health_check and waited > 1.0):
            health = self.ctl.domain(index)
            self.next_health_check = now + 1.0
        self.log.debug("observed daemon=%s domain=%s", state, health.state if health else "-")
        if state == "READY" and health and health.state == "UP":
            step, delay, message = Step.READY, self.cfg.ready_poll_interval, "IMEX domain UP"
        else:
            step = Step.STARTING_DAEMON if state in STARTING_STATES else Step.WAITING_PEERS
            # Back off from fast polling: quick when formation is quick, cheap when it is not.
            delay = self.start_poll
            self.start_poll = min(self.start_poll * 1.4, 0.2)
            message, mismatch = self.describe_wait(state, health)
            error = error or mismatch
        report = self.report_doc(
            uid=str(want["uid"]),
            generation=int(want["generation"]),
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

    # --- release ----------------------------------------------------------------------------
    def release(self) -> tuple[dict[str, Any], float]:
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
        self.files_key = ""
        self.daemon.stop(self.cfg.stop_timeout)
        self.daemon.exit_code = None
        self.channels.remove_all()
        remove_cdi(self.paths.cdi_spec)
        imex.remove_config(self.paths)

    def save_applied(self, uid: str, generation: int, want: dict[str, Any]) -> None:
        self.applied = {
            "domain_uid": uid,
            "generation": generation,
            "request_id": want.get("request_id", ""),
            "channels": want.get("channels"),
        }
        write_atomic(self.paths.applied, _json(self.applied))

    # --- reporting --------------------------------------------------------------------------
    def report_doc(
        self,
        *,
        uid: str | None,
        generation: int,
        step: str,
        daemon_state: str = "",
        domain_state: str = "",
        peers: list[dict] | None = None,
        channels: list[int] | None = None,
        clean: bool = False,
        error: str = "",
        message: str = "",
    ) -> dict[str, Any]:
        return {
            "domain_uid": uid,
            "generation_applied": generation,
            "step": step,
            "daemon_state": daemon_state,
            "domain_state": domain_state,
            "peers": peers or [],
            "channels_present": channels or [],
            "clean": clean,
            "error": error,
            "message": message,
        }

    def send_report(self, report: dict[str, Any]) -> None:
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
        heartbeat_due = self.last_sent is None or now >= self.next_heartbeat
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
        self.stop_event.set()
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
            "step": (self.last_sent or {}).get("step", ""),
        }


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
