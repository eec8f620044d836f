"""Small inline SVG line charts of the Fleet's 24-hour trends: no chart library, no script.

A gap in the data (an hour with no formation) breaks the line rather than being drawn as
zero; the chart is an image labelled with what it shows, its latest value and its peak.
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from domains.computedomains.trends import Series

WIDTH, HEIGHT, PAD = 140, 30, 2


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return "none"
    text = f"{value:.1f}" if unit == "s" and value < 10 else f"{value:.0f}"
    return f"{text} s" if unit == "s" else text


def sparkline(series: Series) -> SafeString:
    """The series as a line over the last day, oldest at the left."""
    values = series.values
    peak = series.peak or 0.0
    top = peak if peak > 0 else 1.0
    step = (WIDTH - 2 * PAD) / max(len(values) - 1, 1)
    segments: list[list[str]] = [[]]
    for i, value in enumerate(values):
        if value is None:
            if segments[-1]:
                segments.append([])
            continue
        x = PAD + i * step
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * value / top
        segments[-1].append(f"{x:.1f},{y:.1f}")
    lines = "".join(
        f'<polyline points="{" ".join(points)}" class="sp-line"/>'
        if len(points) > 1
        else f'<circle cx="{points[0].split(",")[0]}" cy="{points[0].split(",")[1]}" r="1.8" '
        'class="sp-dot"/>'
        for points in segments
        if points
    )
    label = (
        f"{series.name} over the last 24 hours: now {figure(series.last, series.unit)}, "
        f"peak {figure(series.peak, series.unit)}"
    )
    baseline = f'<line x1="0" y1="{HEIGHT - 1}" x2="{WIDTH}" y2="{HEIGHT - 1}" class="sp-base"/>'
    return mark_safe(  # noqa: S308 - numbers, and an escaped label
        f'<svg class="spark" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(label)}</title>{baseline}{lines}</svg>"
    )
