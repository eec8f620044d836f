"""What one tray's agent says is wrong, for the banner on its page: the portal's last
failure of its calls, the agent's own word on its link to the portal (`link_error`), its
last error and the daemon's last log lines (which the agent sends after the first line of
an error that says the daemon exited)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from domains.health import calls
from domains.health.calls import CallFailure
from domains.inventory.models import Node

LOG_MARK = "Its log ends:"


@dataclass(frozen=True)
class TrayTrouble:
    hostname: str
    failure: CallFailure | None  # the portal's last 5xx to this agent
    failure_current: bool  # it is recent: the agent is still failing
    link_error: str  # the agent's own word: "<call>: <what happened>"
    error: str  # the first line of the agent's last error
    log_lines: str  # the daemon's last log lines, when the agent sent them
    reported_at: str  # when the report saying so came (ISO), "" when none

    @property
    def says(self) -> str:
        """The last thing gone wrong, in the agent's words where it has any."""
        if self.link_error:
            return self.link_error
        if self.failure is not None and self.failure_current:
            return self.failure.text
        return self.error

    @property
    def bad(self) -> bool:
        return bool(self.link_error or self.error or self.failure_current)


def tray_trouble(node: Node, *, now: datetime | None = None) -> TrayTrouble:
    """What is wrong with `node`'s agent, from its stored report and its call failures."""
    now = now or timezone.now()
    report = node.agent_report or {}
    failure = calls.failure_of(node.pk)
    error = str(report.get("error") or "")
    first, _, rest = error.partition("\n")
    log = rest.strip()
    if log.startswith(LOG_MARK):
        log = log[len(LOG_MARK) :].strip("\n")
    return TrayTrouble(
        hostname=node.hostname,
        failure=failure,
        failure_current=failure is not None and failure.current(now),
        link_error=str(report.get("link_error") or ""),
        error=first.strip(),
        log_lines=log,
        reported_at=str(report.get("received_at") or ""),
    )
