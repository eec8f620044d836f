"""How a domain's phase, reason and end read on the pages."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django import template

register = template.Library()

# Reasons that only restate the phase they come with: saying them again reads
# "Released Released".
_SAME_AS_PHASE = {"AllMembersReady": "Ready", "Forming": "Forming", "Releasing": "Releasing"}


@register.filter
def reason_words(domain: Any) -> str:
    """The domain's reason in words when it adds to the phase ("awaiting approval"), else ""."""
    reason = getattr(domain, "reason", "") or ""
    phase = getattr(domain, "phase", "")
    if not reason or reason == phase or _SAME_AS_PHASE.get(reason) == phase:
        return ""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", reason).lower()


@register.filter
def ended_at(domain: Any) -> datetime | None:
    """When an ended domain ended: released, or failed."""
    return getattr(domain, "released_at", None) or getattr(domain, "failed_at", None)


@register.filter
def duration_words(value: timedelta | None) -> str:
    """A lifetime as people say it: "7 days", "36 hours", "90 minutes" (not "7 days, 0:00:00")."""
    if value is None:
        return ""
    minutes = int(value.total_seconds() // 60)
    if minutes % (24 * 60) == 0 and minutes:
        days = minutes // (24 * 60)
        return f"{days} day{'s' if days != 1 else ''}"
    if minutes % 60 == 0 and minutes:
        hours = minutes // 60
        return f"{hours} hour{'s' if hours != 1 else ''}"
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
