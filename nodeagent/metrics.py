# SPDX-License-Identifier: Apache-2.0
"""The agent's own figures for Prometheus, served at `/metrics` beside the health probes.

    nodeagent_reconcile_seconds            histogram: one reconcile cycle (fetch, apply, report)
    nodeagent_reconcile_errors_total{error} cycles that failed, by the error's kind
    nodeagent_daemon_restarts_total        nvidia-imex started again after it exited
    nodeagent_imex_daemon_state{state}     1 for the state `nvidia-imex-ctl -q` last gave
    nodeagent_imex_domain_state{state}     1 for the domain state last seen (UP, DEGRADED, DOWN)
    nodeagent_dra_prepare_seconds          histogram: one NodePrepareResources call
    nodeagent_dra_prepare_errors_total     claims a prepare answered with an error
    nodeagent_build_info{version}          the agent's version
    nodeagent_runner_info{version}         the IMEX runner's version, from its status file
    nodeagent_runner_version_skew          1 while the runner's version is not the agent's

No series names the tray: one agent serves one tray, and the scrape says which (the chart's
PodMonitor copies the pod's Node name into `node`, as the portal labels trays), so the
figures join with `portal_tray_info` and DCGM's `Hostname` without a label of their own.

The figures live in this module's registry (prometheus-client's usual shape: one set per
process); the agent calls the few hooks below at the points it already has. Nothing here
touches the network or the portal: a scrape reads memory and, for the runner, one small file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from agentwire.messages import Condition
from nodeagent.config import AGENT_VERSION

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE = Histogram(
    "nodeagent_reconcile_seconds",
    "One reconcile cycle: desired state fetched (or cached), applied, reported.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "nodeagent_reconcile_errors",
    "Reconcile cycles that failed, by the error's kind (PortalError: the portal did not "
    "answer; CtlError: nvidia-imex-ctl failed; OSError: a file or device on the tray).",
    ["error"],
    registry=REGISTRY,
)
DAEMON_RESTARTS = Counter(
    "nodeagent_daemon_restarts",
    "Times nvidia-imex was started again after it exited (each is a new IMEX instance).",
    registry=REGISTRY,
)
PREPARE = Histogram(
    "nodeagent_dra_prepare_seconds",
    "One NodePrepareResources call from the kubelet, however many claims it names.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 45.0),
    registry=REGISTRY,
)
PREPARE_ERRORS = Counter(
    "nodeagent_dra_prepare_errors",
    "ResourceClaims a NodePrepareResources call answered with an error (the kubelet retries).",
    registry=REGISTRY,
)

T = TypeVar("T")


class _State:
    """What the last cycle observed, and the runner's last status, for the collector."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.daemon = ""
        self.domain = ""
        self.runner_version: str | None = None  # None: no runner (or not seen yet)


STATE = _State()


def timed(cycle: Callable[[], T]) -> T:
    """Run one reconcile cycle, timing it and counting its failure by kind."""
    started = time.perf_counter()
    try:
        return cycle()
    except Exception as exc:
        RECONCILE_ERRORS.labels(error=type(exc).__name__).inc()
        raise
    finally:
        RECONCILE.observe(time.perf_counter() - started)


def observed(report: Any) -> None:
    """The states a cycle saw (a StatusReport), whether or not it was sent."""
    with STATE.lock:
        STATE.daemon = report.get("daemon_state", "") or ""
        STATE.domain = report.get("domain_state", "") or ""


def daemon_restarted() -> None:
    DAEMON_RESTARTS.inc()


RUNNER_SKEW = "RunnerVersionSkew"


def runner_condition(version: str | None) -> Condition | None:
    """A tray condition while the IMEX runner runs another version than this agent
    (`version`: the running runner's, from its status; None: no runner running).

    The runner's DaemonSet is updated only by deleting its pod (`OnDelete`: a new runner
    is a new nvidia-imex), so after an upgrade an old runner keeps running on every tray
    until an operator replaces it on an idle tray. It still works; the condition (not
    blocking) says which trays wait for that, and the version is also a metric.
    """
    if version is None:
        with STATE.lock:
            STATE.runner_version = None
        return None  # no runner running: the daemon's own problem says so
    with STATE.lock:
        STATE.runner_version = version
    if version == AGENT_VERSION:
        return None
    shown = version or "a version older than 0.2 (it does not say)"
    return {
        "type": RUNNER_SKEW,
        "blocking": False,
        "message": (
            f"The IMEX runner on this tray runs {shown}; the agent is {AGENT_VERSION}. The "
            "runner is replaced only when its pod is deleted, which stops nvidia-imex: "
            "delete it while the tray serves no domain (drain the tray first)."
        ),
    }


class StateCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        with STATE.lock:
            daemon, domain, runner = STATE.daemon, STATE.domain, STATE.runner_version
        yield InfoMetricFamily(
            "nodeagent_build", "The node agent's version.", {"version": AGENT_VERSION}
        )
        states = GaugeMetricFamily(
            "nodeagent_imex_daemon_state",
            "1 for the state nvidia-imex-ctl -q last reported (NONE: no daemon answers).",
            labels=["state"],
        )
        states.add_metric([daemon or "NONE"], 1)
        yield states
        domains = GaugeMetricFamily(
            "nodeagent_imex_domain_state",
            "1 for the IMEX domain state last seen (NONE: the tray serves no domain yet).",
            labels=["state"],
        )
        domains.add_metric([domain or "NONE"], 1)
        yield domains
        if runner is not None:
            yield InfoMetricFamily(
                "nodeagent_runner",
                "The IMEX runner's version (empty: a runner too old to say).",
                {"version": runner},
            )
        yield GaugeMetricFamily(
            "nodeagent_runner_version_skew",
            "1 while the IMEX runner on this tray runs another version than the agent.",
            value=int(runner is not None and runner != AGENT_VERSION),
        )


REGISTRY.register(StateCollector())
