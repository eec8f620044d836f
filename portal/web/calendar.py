"""The maintenance calendar's layout: a week as a row per rack and a column per day, a
month as a row per week; each cell lists the windows over it with their hours that day
(UTC)."""

from __future__ import annotations

import calendar as stdlib_calendar
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from domains.foresight.calendar import CalendarWindow


@dataclass(frozen=True)
class Entry:
    """A window as one day's cell shows it."""

    window: CalendarWindow
    hours: str  # "02:00 to 06:00", "from 22:00", "until 04:00", "all day"


@dataclass
class Day:
    day: date
    entries: list[Entry] = field(default_factory=list)
    today: bool = False
    in_month: bool = True


def day_span(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(), tzinfo=UTC)
    return start, start + timedelta(days=1)


def entries_on(day: date, windows: list[CalendarWindow], rack: str = "") -> list[Entry]:
    """The windows over `day` (over `rack`, when given), with their hours that day."""
    start, end = day_span(day)
    out = []
    for w in windows:
        if w.starts_at >= end or w.ends_at <= start or (rack and rack not in w.racks):
            continue
        begins, ends = w.starts_at > start, w.ends_at < end
        hours = (
            f"{w.starts_at:%H:%M} to {w.ends_at:%H:%M}"
            if begins and ends
            else f"from {w.starts_at:%H:%M}"
            if begins
            else f"until {w.ends_at:%H:%M}"
            if ends
            else "all day"
        )
        out.append(Entry(w, hours))
    return out


def parse_day(text: str) -> date | None:
    """A `YYYY-MM-DD` from a query string, or None when it is not one."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())  # Monday


def week_grid(
    first: date, windows: list[CalendarWindow], today: date
) -> tuple[list[date], list[tuple[str, list[Day]]]]:
    """(the seven days from `first`, one row per rack with a window that week)."""
    days = [first + timedelta(days=i) for i in range(7)]
    racks = sorted({r for w in windows for r in w.racks})
    if any(not w.racks for w in windows):
        racks.append("")  # trays in no rack
    rows = [
        (rack, [Day(d, entries_on(d, windows, rack), d == today) for d in days]) for rack in racks
    ]
    return days, rows


def month_grid(first: date, windows: list[CalendarWindow], today: date) -> list[list[Day]]:
    """The month of `first` as weeks (Monday first) of days, each with its windows."""
    weeks = stdlib_calendar.Calendar(firstweekday=0).monthdatescalendar(first.year, first.month)
    return [
        [Day(d, entries_on(d, windows), d == today, d.month == first.month) for d in week]
        for week in weeks
    ]


def month_start(day: date) -> date:
    return day.replace(day=1)


def add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)
