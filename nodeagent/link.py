# SPDX-License-Identifier: Apache-2.0
"""The agent's link to the portal: its node token, the nudges, the desired state, the facts.

The node token is kept on disk (an agent restart does not join again); one the portal
refuses is forgotten, and the tray joins again. A nudge on the websocket has the desired
state fetched on the next cycle; without one it is fetched every poll interval. A call
that fails is tried again with backoff while the cycle goes on with what the tray holds,
and the agent's report says which call failed (`PortalClient.link_error`).
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import jsonschema

from agentwire.messages import DESIRED_STATE_SCHEMA, DesiredState
from nodeagent.client import MalformedDocument, Nudger, PortalClient, PortalError, Unauthorized
from nodeagent.config import AgentConfig
from nodeagent.facts import FactsKeeper
from nodeagent.files import read_json, remove, write_atomic
from nodeagent.traylog import TrayLog

# Retries back off, but stay well under the portal's heartbeat staleness (30 s by default):
# a cycle that fails for a local reason must not make a healthy member look lost.
MAX_BACKOFF_S = 10.0
DESIRED_STATE = jsonschema.Draft202012Validator(DESIRED_STATE_SCHEMA)


def backoff(delay: float) -> float:
    """The next wait after `delay`: 0.5 s doubling up to MAX_BACKOFF_S."""
    return min(max(delay * 2, 0.5), MAX_BACKOFF_S)


class PortalLink:
    def __init__(
        self,
        config: AgentConfig,
        facts: FactsKeeper,
        log: TrayLog,
        *,
        stop: threading.Event,
        wake: threading.Event,
    ) -> None:
        self.cfg = config
        self.paths = config.paths
        self.facts = facts
        self.log = log
        self.stop_event = stop
        self.wake = wake
        self.client = PortalClient(config.portal)
        self.nudger: Nudger | None = None
        self.desired: DesiredState | None = None  # fetched by this agent process
        self.last_known: DesiredState | None = _last_known(config.paths.desired)
        self.nudged = True
        self.next_fetch = 0.0
        self.retry = 0.0  # backoff of a failed desired-state fetch (0: none failed)
        self.facts_retry_at = self.facts_backoff = 0.0  # of facts the portal did not take

    def nudge(self) -> None:
        self.nudged = True
        self.wake.set()

    def paced(self, delay: float) -> float:
        """The cycle's `delay`, shortened to the retry of a desired state not fetched."""
        return min(delay, self.retry) if self.retry else delay

    def close(self) -> None:
        self.client.close()

    # --- the node token ---------------------------------------------------------------------
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

    def rejoin(self, refused: Unauthorized) -> None:
        """The portal refused the node token: forget it; the next cycle joins again."""
        self.log.warning("node token refused (%s); joining again", refused)
        self.client.token = ""
        remove(self.paths.credentials)

    # --- facts ------------------------------------------------------------------------------
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
            self.facts_backoff = backoff(self.facts_backoff)
            self.facts_retry_at = now + self.facts_backoff
            self.log.warning("facts not sent: %s (retry in %.1fs)", exc, self.facts_backoff)
            return
        self.facts_backoff = self.facts_retry_at = 0.0
        self.facts.accepted(document)

    # --- the desired state ------------------------------------------------------------------
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
            self.retry = backoff(self.retry)
            log = self.log.error if isinstance(exc, MalformedDocument) else self.log.warning
            log("%s; keeping what the tray holds (retry in %.1fs)", exc, self.retry)
            return self.desired
        self.retry = 0.0
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
        self.keep(self.desired)
        return self.desired

    def keep(self, desired: DesiredState) -> None:
        """Keep the desired state on disk (when it changed) for the next agent process. No
        fsync: a file lost to a power cut reads as none, which advertises the tray as not
        eligible until the portal answers (never as free)."""
        if desired == self.last_known:
            return
        try:
            write_atomic(self.paths.desired, _json(dict(desired)), durable=False)
        except OSError as exc:  # a full disk: the tray runs on; only a restart reads it
            self.log.warning("desired state not kept on disk: %s", exc)
        self.last_known = desired

    def advertised(self) -> tuple[DesiredState | None, bool]:
        """What the tray's ResourceSlice says: (the desired state, fetched by this process).
        Before its first fetch, the last one an earlier agent kept."""
        if self.desired is not None:
            return self.desired, True
        return self.last_known, False


def _json(doc: dict[str, object]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _last_known(path: Path) -> DesiredState | None:
    """The desired state an earlier agent kept, if it is one (a file from another version
    that does not fit the contract is no desired state at all)."""
    doc = read_json(path)
    if doc is None or not DESIRED_STATE.is_valid(doc):
        return None
    desired: DesiredState = doc  # type: ignore[assignment]
    return desired
