"""The paints every rack drawing shares (state fills, their pattern swatches, the domains'
outline colours) and the small figures drawn beside the elevations: the domain key square
and the clique's use bar.

One colour system: a tray's *state* is its fill (free, in use, cordoned, draining, down,
agent silent, not ready), and the last five also carry a pattern swatch and the word, so
nothing is told by colour alone; a *domain* is an outline around its
trays plus its name written on each.
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from domains.placement.model import CliqueSummary, TrayStatus

# Tray status → its fill class (static/css).
FILL = {
    TrayStatus.FREE: "st-free",
    TrayStatus.IN_USE: "st-used",
    TrayStatus.CORDONED: "st-cordoned",
    TrayStatus.DRAINING: "st-draining",
    TrayStatus.DOWN: "st-down",
    TrayStatus.STALE: "st-silent",
}
SWATCH = {
    "cordoned": "url(#el-cordoned)",
    "draining": "url(#el-draining)",
    "down": "url(#el-down)",
    "notready": "url(#el-notready)",
    "silent": "url(#el-silent)",
}
# Outlines of domains: dark hues apart from one another and at least 3:1 on every fill.
OUTLINES = ("#0b5d99", "#9a3a0a", "#6b2d8a", "#00674a", "#1f2937", "#7a5c00", "#a01e5a")

DEFS = (
    "<defs>"
    '<pattern id="el-cordoned" width="5" height="5" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="5" height="5" fill="#fde68a"/>'
    '<line x1="0" y1="0" x2="0" y2="5" stroke="#92400e" stroke-width="2"/></pattern>'
    '<pattern id="el-draining" width="5" height="5" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(-45)"><rect width="5" height="5" fill="#fed7aa"/>'
    '<line x1="0" y1="0" x2="0" y2="5" stroke="#9a3412" stroke-width="3"/></pattern>'
    '<pattern id="el-down" width="6" height="6" patternUnits="userSpaceOnUse">'
    '<rect width="6" height="6" fill="#fecaca"/>'
    '<path d="M0 0L6 6M6 0L0 6" stroke="#7f1d1d" stroke-width="1.3"/></pattern>'
    '<pattern id="el-notready" width="4" height="4" patternUnits="userSpaceOnUse">'
    '<rect width="4" height="4" fill="#e5e7eb"/><circle cx="2" cy="2" r="1" fill="#374151"/>'
    "</pattern>"
    '<pattern id="el-silent" width="6" height="6" patternUnits="userSpaceOnUse">'
    '<rect width="6" height="6" fill="#f3f4f6"/><circle cx="3" cy="3" r="1.6" fill="none" '
    'stroke="#374151" stroke-width="1"/></pattern>'
    '<pattern id="el-maint" width="4" height="4" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="4" height="4" fill="#ede9fe"/>'
    '<line x1="0" y1="0" x2="0" y2="4" stroke="#5b21b6" stroke-width="2"/></pattern>'
    "</defs>"
)

# A GPU's health → (its class suffix, the mark drawn on it).
GPU_MARK = {
    "healthy": ("ok", ""),
    "degraded": ("degraded", "!"),
    "failed": ("failed", "\u00d7"),
}


def defs() -> SafeString:
    """The patterns every rack drawing refers to, once per page."""
    return mark_safe(  # noqa: S308 - a constant
        '<svg class="el-defs" width="0" height="0" aria-hidden="true" focusable="false" '
        f'xmlns="http://www.w3.org/2000/svg">{DEFS}</svg>'
    )


def outline(domain_id: int) -> str:
    """A domain's outline colour, the same on every drawing."""
    return OUTLINES[domain_id % len(OUTLINES)]


def domain_key(domain_id: int) -> SafeString:
    """A small square in the outline colour a domain has on the drawings."""
    return mark_safe(  # noqa: S308 - a constant colour
        '<svg class="dkey" viewBox="0 0 12 12" width="12" height="12" aria-hidden="true">'
        f'<rect x="1" y="1" width="10" height="10" class="st-used do" '
        f'stroke="{outline(domain_id)}"/></svg>'
    )


def clique_bar(summary: CliqueSummary) -> SafeString:
    """Use and fragmentation of one clique as a labelled bar: in use, the largest free
    block, the other free trays (fragments) and the unavailable ones."""
    total = max(summary.total, 1)
    width = 200
    scale = width / total
    block = min(summary.largest_free_block, summary.free)
    pieces = (
        ("in use", summary.in_use, "cb-used"),
        ("largest free block", block, "cb-block"),
        ("free outside it", summary.free - block, "cb-frag"),
        ("unavailable", summary.unavailable, "cb-off"),
    )
    x, rects, words = 0.0, [], []
    for word, count, css in pieces:
        if count <= 0:
            continue
        rects.append(
            f'<rect x="{x:.1f}" y="0" width="{count * scale:.1f}" height="10" class="{css}"/>'
        )
        words.append(f"{count} {word}")
        x += count * scale
    label = f"Clique {summary.name}: {summary.total} trays, " + ", ".join(words)
    return mark_safe(  # noqa: S308 - escaped
        f'<svg class="cbar" viewBox="0 0 {width} 10" width="{width}" height="10" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(label)}</title>"
        f'<rect width="{width}" height="10" class="cb-bg"/>{"".join(rects)}</svg>'
    )
