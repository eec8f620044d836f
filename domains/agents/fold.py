"""The agent's report in the lifecycle's words, folded into its membership.

The lifecycle (`domain_members_report`) is the single owner of member and phase changes;
this says what the agent's step means there (`member_report`). A report that changes its
member is folded on a worker, once per burst for the whole domain (`reports_fold`); the
rarer path through Django folds its report at once (`agent_member_report`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from domains.agents.report import AgentReport, Step
from domains.computedomains.members import (
    MemberReport,
    domain_member_report,
    domain_members_report,
)
from domains.computedomains.models import MemberState

# What each step of the agent means for its member while the domain runs.
_STEP_STATE = {
    Step.CONFIGURING: MemberState.CONFIGURING,
    Step.STARTING_DAEMON: MemberState.CONFIGURING,
    Step.WAITING_PEERS: MemberState.WAITING_PEERS,
    Step.READY: MemberState.READY,
    Step.FAILED: MemberState.FAILED,
    Step.RELEASING: MemberState.CONFIGURING,  # tearing down something else first
    Step.IDLE: MemberState.ASSIGNED,  # has not picked the domain up yet
}


def agent_member_report(*, node_id: int, report: AgentReport) -> None:
    """Fold the report into the membership that holds the tray, if any, now (no heartbeat)."""
    domain_member_report(node_id=node_id, report=member_report(report))


def member_report(report: AgentReport) -> MemberReport:
    """The agent's report in the lifecycle's words."""
    return MemberReport(
        domain_uid=report.domain_uid,
        state=_STEP_STATE.get(report.step, MemberState.CONFIGURING),
        clean=report.clean,
        generation_applied=report.generation_applied,
        step=report.step,
        message=report.error or report.message,
        daemon_state=report.daemon_state,
        connections={str(p.index): p.status for p in report.peers},
    )


def reports_fold(*, domain_id: int) -> int:
    """Fold the latest report of every active member of the domain (as recorded on its
    tray) into the members and the phase, in one transaction; returns how many changed.

    Run on a worker once per burst of changing reports (`announce_member_reports`); a
    report that lands while this runs announces itself again, so nothing is missed.
    """
    return domain_members_report(domain_id=domain_id, stored=_from_stored)


def _from_stored(stored: dict[str, Any], since: datetime) -> MemberReport | None:
    """`member_report` of the report `stored_report` recorded on the tray, read straight from the
    stored dict (a fold reads every member's report, each with a peer per tray: rebuilding
    AgentReport and its PeerStatus list first was ~7% of a fold's CPU); None when there is
    none received `since`."""
    if not stored or "step" not in stored:
        return None
    try:
        if datetime.fromisoformat(stored["received_at"]) < since:
            return None
    except (KeyError, TypeError, ValueError):
        return None
    step = stored["step"]
    return MemberReport(
        domain_uid=stored["domain_uid"],
        state=_STEP_STATE.get(step, MemberState.CONFIGURING),
        clean=stored.get("clean", False),
        generation_applied=stored["generation_applied"],
        step=step,
        message=stored.get("error") or stored.get("message", ""),
        daemon_state=stored.get("daemon_state", ""),
        connections={str(p["index"]): p["status"] for p in stored.get("peers") or []},
    )
