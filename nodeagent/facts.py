# SPDX-License-Identifier: Apache-2.0
"""The tray's facts and conditions as the agent keeps them, and when it re-sends them.

Probed at start; probed again with backoff while the probe has not settled (NVML not
loadable yet, a fabric registration in progress: 1 s, doubling up to a minute); the host's
own IMEX service looked for every poll interval. The document (`NodeFacts`) is sent with
the join, and again under the node token after every start and whenever it changes, so a
restarted agent re-registers a clique, GPUs or driver that changed while it was away.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import Any

from agentwire.messages import Condition, ConditionType, NodeFacts
from nodeagent.config import AGENT_VERSION, AgentConfig
from nodeagent.driver import BINARY_DIRS, DriverRoot
from nodeagent.host import host_service_condition
from nodeagent.imex.runnerfiles import running_version, status_path
from nodeagent.metrics import runner_condition
from nodeagent.probe import Facts, probe

Log = logging.Logger | logging.LoggerAdapter[Any]


class FactsKeeper:
    def __init__(
        self, config: AgentConfig, driver: DriverRoot, imex_bin: list[str], log: Log
    ) -> None:
        self.cfg = config
        self.paths = config.paths
        self.driver = driver
        self.imex_bin = imex_bin
        self.log = log
        self.facts: Facts | None = None
        self.next_probe = 0.0
        self.backoff = config.fabric_retry_s
        self.host_condition: Condition | None = None
        self.next_host_check = 0.0
        self.sent: NodeFacts | None = None  # what the portal last accepted

    def probe(self) -> Facts:
        """NVML and /proc/devices now; an unsettled answer is probed again with backoff."""
        before = self.facts
        self.facts = facts = probe(
            proc_devices=self.paths.proc_devices,
            hostname=self.cfg.hostname,
            ip=self.cfg.ip,
            driver=self.driver,
            facts_file=self.cfg.fabric_facts,
        )
        if facts.settled:
            self.backoff = self.cfg.fabric_retry_s
            if before is not None and not before.settled:
                self.log.info("fabric probe settled: clique %s", facts.clique or "none")
            return facts
        self.next_probe = time.monotonic() + self.backoff
        self.log.info(
            "fabric probe not settled (%s); probing again in %.0f s",
            "; ".join(c["message"] for c in facts.conditions)[:500],
            self.backoff,
        )
        self.backoff = min(self.backoff * 2, self.cfg.fabric_retry_max_s)
        return facts

    def driver_version(self) -> str:
        """The driver's version as last probed ("" before the first probe)."""
        return self.facts.driver_version if self.facts else ""

    def check_host(self) -> None:
        self.host_condition = host_service_condition(self.paths)
        self.next_host_check = time.monotonic() + self.cfg.poll_interval

    def refresh(self, now: float) -> None:
        if self.facts is not None and not self.facts.settled and now >= self.next_probe:
            self.probe()
        if now >= self.next_host_check:
            self.check_host()

    def missing_binary(self) -> str:
        """Why the tray's nvidia-imex cannot be found, or ""."""
        command = self.imex_bin[0]
        if "/" in command or shutil.which(command):
            return ""
        dirs = ", ".join(str(self.driver.path / d) for d in BINARY_DIRS[:2])
        return (
            f"nvidia-imex is neither under the driver root ({dirs}, …) nor on PATH: install "
            "the driver's nvidia-imex package, or point --driver-root at the driver."
        )

    def conditions(self) -> list[Condition]:
        found = list(self.facts.conditions) if self.facts else []
        if self.host_condition is not None:
            found.append(self.host_condition)
        runner = (
            runner_condition(running_version(status_path(self.paths)))
            if self.cfg.imex_runner
            else None
        )
        if runner is not None:
            found.append(runner)
        missing = self.missing_binary()
        if missing:
            kind = ConditionType.IMEX_BINARY_MISSING
            found.append({"type": kind, "blocking": True, "message": missing})
        return found

    def document(self) -> NodeFacts:
        facts = self.facts or self.probe()
        return {
            "hostname": facts.hostname,
            "ip": facts.ip,
            "gpus": [g.document() for g in facts.gpus],
            "cluster_uuid": facts.cluster_uuid,
            "clique_id": facts.clique_id,
            "driver_version": facts.driver_version,
            "channel_major": facts.channel_major,
            "channel_count": facts.channel_count,
            "agent_version": AGENT_VERSION,
            "conditions": self.conditions(),
        }

    def changed(self) -> NodeFacts | None:
        """The document to send, when it differs from what the portal last accepted."""
        document = self.document()
        return None if document == self.sent else document

    def accepted(self, document: NodeFacts) -> None:
        """The portal took `document`: log the conditions it raised or cleared."""
        before = {c["type"] for c in self.sent["conditions"]} if self.sent else set()
        now = {c["type"]: c for c in document["conditions"]}
        for kind in sorted(set(now) - before):
            self.log.warning("tray condition %s: %s", kind, now[kind]["message"])
        for kind in sorted(before - set(now)):
            self.log.info("tray condition %s cleared", kind)
        self.sent = document
