"""Small inline SVG line charts of the Fleet's trends: no chart library, no script.

Each chart has its axes: the value axis says 0 and the peak (with its unit) at its ends, the
time axis the window's start and "now". A gap in the data (an hour with no formation)
breaks the line rather than being drawn as zero; the chart is an image labelled with what it
shows, over which time, its latest value and its peak.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from domains.computedomains.trends import Series

WIDTH, HEIGHT = 180, 52
LEFT, RIGHT, TOP, BOTTOM = 30, 4, 4, 13  # room for the axes' labels
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return "none"
    text = f"{value:.1f}" if unit == "s" and value < 10 else f"{value:.0f}"
    return f"{text} s" if unit == "s" else text


def span_words(span: timedelta) -> str:
    """'24 h', '7 d', '6 h': how far back a chart reaches."""
    hours = span.total_seconds() / 3600
    return f"{hours / 24:.0f} d" if hours >= 48 else f"{hours:.0f} h"


def sparkline(series: Series) -> SafeString:
    """The series as a line over its window, oldest at the left, with both axes."""
    values = series.values
    peak = series.peak or 0.0
    top = peak if peak > 0 else 1.0
    step = PLOT_W / max(len(values) - 1, 1)
    segments: list[list[str]] = [[]]
    for i, value in enumerate(values):
        if value is None:
            if segments[-1]:
                segments.append([])
            continue
        x = LEFT + i * step
        y = TOP + PLOT_H - PLOT_H * value / top
        segments[-1].append(f"{x:.1f},{y:.1f}")
    lines = "".join(
        f'<polyline points="{" ".join(points)}" class="sp-line"/>'
        if len(points) > 1
        else f'<circle cx="{points[0].split(",")[0]}" cy="{points[0].split(",")[1]}" r="1.8" '
        'class="sp-dot"/>'
        for points in segments
        if points
    )
    span = series.step * len(values)
    label = (
        f"{series.name} over the last {span_words(span)}: now "
        f"{figure(series.last, series.unit)}, peak {figure(series.peak, series.unit)}"
    )
    return mark_safe(  # noqa: S308 - numbers, and escaped words
        f'<svg class="spark" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(label)}</title>{_axes(series, peak, span)}{lines}</svg>"
    )


def _axes(series: Series, peak: float, span: timedelta) -> str:
    """Both axes and their labels: 0 and the peak up the left, start and now along the
    bottom."""
    bottom, right = TOP + PLOT_H, LEFT + PLOT_W
    high = figure(peak, series.unit) if peak > 0 else "0"
    return (
        f'<g class="sp-axes" aria-hidden="true">'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" class="sp-base"/>'
        f'<line x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" class="sp-base"/>'
        f'<text x="{LEFT - 3}" y="{TOP + 7}" class="sp-tick" text-anchor="end">'
        f"{escape(high)}</text>"
        f'<text x="{LEFT - 3}" y="{bottom}" class="sp-tick" text-anchor="end">0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 2}" class="sp-tick">{span_words(span)} ago</text>'
        f'<text x="{right}" y="{HEIGHT - 2}" class="sp-tick" text-anchor="end">now</text>'
        "</g>"
    )
