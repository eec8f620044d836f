"""The agents' reports of a domain folded into its members, on a worker.

The lifecycle (`domains.computedomains.members`) is the single owner of member and phase
changes and reads the contract's report itself. A report that changes its member is folded
on a worker, once per burst for the whole domain (`reports_fold`); the rarer path through
Django folds its report at once (`members.domain_member_report`).
"""

from __future__ import annotations

from domains.computedomains.members import domain_members_report


def reports_fold(*, domain_id: int) -> int:
    """Fold the latest report of every active member of the domain (as recorded on its
    tray) into the members and the phase, in one transaction; returns how many changed.

    Run on a worker once per burst of changing reports (`announce_member_reports`); a
    report that lands while this runs announces itself again, so nothing is missed.
    """
    return domain_members_report(domain_id=domain_id, stored=True)
