"""The maintenance calendar across racks: a week (a row per rack, a column per day) or a
month (a row per week) of the scheduled maintenance windows, with their hours, reasons and
racks."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone

from domains.foresight.calendar import windows_between
from portal.web import calendar as layout
from portal.web.access import SignedInRequest, operator_required


@operator_required
def calendar(request: SignedInRequest) -> HttpResponse:
    """`?view=week|month` (week), `?start=YYYY-MM-DD` (today): the week or month holding it."""
    view = "month" if request.GET.get("view") == "month" else "week"
    today = timezone.now().date()
    asked = layout.parse_day(request.GET.get("start", "")) or today
    if view == "week":
        first = layout.week_start(asked)
        last, before, after = first + timedelta(days=7), first - timedelta(7), first + timedelta(7)
    else:
        first = layout.month_start(asked)
        before, after = layout.add_months(first, -1), layout.add_months(first, 1)
        last = after
    grid_from = layout.week_start(first)
    grid_to = layout.week_start(last) + timedelta(days=7)  # a month's grid shows whole weeks
    windows = windows_between(request.user, *_span(grid_from, grid_to))
    context = {
        "view": view,
        "first": first,
        "last": last - timedelta(days=1),
        "before": before,
        "after": after,
        "today": today,
        "windows": windows,
        "now": timezone.now(),
    }
    if view == "week":
        context["days"], context["rows"] = layout.week_grid(first, windows, today)
    else:
        context["weeks"] = layout.month_grid(first, windows, today)
    return render(request, "operator/calendar.html", context)


def _span(first: date, last: date) -> tuple[datetime, datetime]:
    return layout.day_span(first)[0], layout.day_span(last)[0]
