"""Server-side SVG rack elevations (in the manner of NetBox's), one per rack.

A GB200 NVL72 rack is drawn top to bottom as the hardware sits: compute trays 1-10, the nine
NVLink switch trays, compute trays 11-18. Each compute tray shows its four GPU cells, its
slot number and one word (the domain's name, "in use", or the tray's state), so nothing is
told by colour alone: cordoned and draining trays are also hatched, down trays crossed,
silent ones dotted, unhealthy GPUs marked "!" or "x". Clique boundaries are outlined and
labelled. Every tray carries a `<title>` (the hover card) and, where the viewer may follow
it, a link. Built as one string: 100 racks by 27 rows must render in milliseconds.
"""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from portal.web.fabric import RackView, TrayView

register = template.Library()

WIDTH = 250
ROW = 18  # compute tray height
SWITCH_ROW = 7
TOP = 22
LEFT = 26  # slot numbers
GPU_X = 30
GPU_W = 24
TEXT_X = GPU_X + 4 * (GPU_W + 2) + 6

STATE_FILL = {
    "free": "#ecfdf5",
    "in_use": "#e4e4e7",
    "cordoned": "url(#hatch-cordoned)",
    "draining": "url(#hatch-draining)",
    "down": "url(#cross-down)",
    "unknown": "url(#dots-unknown)",
    "stale": "url(#dots-unknown)",
    "blocked": "url(#cross-down)",
}
FLAGGED_STATES = ("cordoned", "draining", "down")
GPU_MARK = {
    "healthy": ("#ffffff", ""),
    "degraded": ("#fdba74", "!"),
    "failed": ("#b91c1c", "\u00d7"),
}

DEFS = (
    "<defs>"
    '<pattern id="hatch-cordoned" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fef3c7"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#b45309" stroke-width="2"/></pattern>'
    '<pattern id="hatch-draining" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(-45)"><rect width="6" height="6" fill="#ffedd5"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#c2410c" stroke-width="3"/></pattern>'
    '<pattern id="cross-down" width="8" height="8" patternUnits="userSpaceOnUse">'
    '<rect width="8" height="8" fill="#fecaca"/>'
    '<path d="M0 0L8 8M8 0L0 8" stroke="#991b1b" stroke-width="1.2"/></pattern>'
    '<pattern id="dots-unknown" width="5" height="5" patternUnits="userSpaceOnUse">'
    '<rect width="5" height="5" fill="#f4f4f5"/><circle cx="2.5" cy="2.5" r="1" '
    'fill="#52525b"/></pattern>'
    "</defs>"
)


def _rows(rack: RackView) -> list[tuple[str, int]]:
    """Display order: ("compute", slot) / ("switch", n), top to bottom."""
    upper = min(10, rack.compute_slots)
    rows = [("compute", s) for s in range(1, upper + 1)]
    rows += [("switch", s) for s in range(1, rack.switch_slots + 1)]
    rows += [("compute", s) for s in range(upper + 1, rack.compute_slots + 1)]
    return rows


TRAY_DOWN_DAEMON = "unknown: tray down"


@register.filter
def daemon_word(daemon_state: str, tray_state: str) -> str:
    """The IMEX daemon's state as a page may say it: on a tray that is down, the last word
    its agent reported (READY, say) is no longer known to be true."""
    if tray_state == "down":
        return TRAY_DOWN_DAEMON
    return daemon_state or "—"


@register.filter
def first_line(text: str) -> str:
    """An agent's words up to the first newline (what follows is a log's last lines)."""
    return (text or "").split("\n", 1)[0]


@register.filter
def after_first_line(text: str) -> str:
    return (text or "").partition("\n")[2]


def _hover(tray: TrayView) -> str:
    lines = [f"{tray.hostname} (slot {tray.slot})", f"state: {tray.state}, {tray.status_word}"]
    if tray.domain:
        lines.append(f"domain: {tray.domain.label}")
    if tray.clique_name:
        lines.append(f"clique: {tray.clique_name}")
    bad = [f"GPU{g.index} {g.health}" for g in tray.gpus if g.health != "healthy"]
    lines.append("GPUs: " + (", ".join(bad) if bad else f"{len(tray.gpus)} healthy"))
    if tray.daemon_state:
        lines.append(f"IMEX daemon: {daemon_word(tray.daemon_state, tray.state)}")
    lines.append(
        f"heartbeat: {timesince(tray.last_heartbeat)} ago"
        if tray.last_heartbeat
        else "heartbeat: never"
    )
    if tray.highlight:
        lines.append("the request would land here" if tray.preview else "a tray of this domain")
    return escape("\n".join(lines))


# A clique: its id, name, and the y of its first and last rows in the drawing.
Run = tuple[int | None, str, int, int]
CHAR_W = 5.0  # a 9 px word's average character width
LABEL_CHAR_W = 3.9  # a 7 px clique label's


def _tray(tray: TrayView | None, slot: int, y: int, chars: int = 20) -> str:
    if tray is None:
        return (
            f'<g class="tray empty">'
            f'<text x="{LEFT - 3}" y="{y + 12}" class="slot">{slot:02d}</text>'
            f'<rect x="{GPU_X - 2}" y="{y}" width="{WIDTH - GPU_X - 2}" height="{ROW - 2}" '
            f'class="empty-slot"/><text x="{TEXT_X}" y="{y + 12}" class="word">empty</text></g>'
        )
    if tray.domain is not None:
        fill, word = tray.domain.colour, tray.domain.label
        if tray.state == "down":  # a dead tray is drawn dead, whoever held it
            fill = STATE_FILL["down"]
    else:
        fill, word = STATE_FILL.get(tray.status, "#f4f4f5"), tray.status_word
    # A tray can serve a domain and be cordoned, draining or down at once: say both.
    flagged = tray.domain is not None and tray.state in FLAGGED_STATES
    classes = f"tray status-{tray.status} state-{tray.state}"
    classes += " highlight" if tray.highlight else ""
    parts = [
        f'<g class="{classes}" data-hostname="{escape(tray.hostname)}" '
        f'data-status="{tray.status}"><title>{_hover(tray)}</title>',
        f'<text x="{LEFT - 3}" y="{y + 12}" class="slot">{slot:02d}</text>',
        f'<rect x="{GPU_X - 2}" y="{y}" width="{WIDTH - GPU_X - 2}" height="{ROW - 2}" '
        f'fill="{fill}" class="tray-bg"/>',
    ]
    if flagged:
        parts.append(
            f'<rect x="{WIDTH - 14}" y="{y}" width="12" height="{ROW - 2}" '
            f'fill="{STATE_FILL[tray.state]}" class="state-flag"/>'
        )
        word = f"{tray.state} · {word}"
    for i, gpu in enumerate(tray.gpus[:4]):
        colour, mark = GPU_MARK.get(gpu.health, ("#d4d4d8", "?"))
        x = GPU_X + i * (GPU_W + 2)
        parts.append(
            f'<rect x="{x}" y="{y + 3}" width="{GPU_W}" height="{ROW - 8}" fill="{colour}" '
            f'class="gpu gpu-{gpu.health}"/>'
        )
        if mark:
            parts.append(f'<text x="{x + GPU_W / 2}" y="{y + 12}" class="gpu-mark">{mark}</text>')
    if tray.highlight:
        word = "▶ lands here" if tray.preview else f"▶ {word}"
    label = word if len(word) <= chars else word[: chars - 1] + "…"
    parts.append(f'<text x="{TEXT_X}" y="{y + 12}" class="word">{escape(label)}</text></g>')
    body = "".join(parts)
    url = tray.domain.url if (tray.domain and tray.domain.url and not tray.url) else tray.url
    if url:
        body = f'<a href="{escape(url)}">{body}</a>'
    return body


def _clique_runs(rack: RackView, positions: dict[int, int]) -> list[Run]:
    """Each run of consecutive compute rows that belong to the same clique: (clique,
    name, first y, last y)."""
    runs: list[Run] = []
    previous_y = None
    for slot in sorted(positions):
        tray = rack.trays.get(slot)
        clique, name = (tray.clique_id, tray.clique_name) if tray else (None, "")
        y = positions[slot]
        contiguous = previous_y is not None and y - previous_y == ROW
        if runs and runs[-1][0] == clique and contiguous:
            runs[-1] = (clique, name, runs[-1][2], y)
        else:
            runs.append((clique, name, y, y))
        previous_y = y
    return runs


def _clique_outlines(runs: list[Run]) -> str:
    """Outline and label each run; the label sits at the right of its first row, whose
    word is cut short to leave it room (`_word_room`)."""
    out: list[str] = []
    for clique_id, name, y0, y1 in runs:
        if clique_id is None:
            continue
        out.append(
            f'<rect x="1" y="{y0 - 1}" width="{WIDTH - 2}" height="{y1 - y0 + ROW}" '
            f'class="clique-outline"><title>clique {escape(name)}</title></rect>'
            f'<text x="{WIDTH - 4}" y="{y0 + 7}" class="clique-label">{escape(name[-12:])}</text>'
        )
    return "".join(out)


def _word_room(runs: list[Run]) -> dict[int, int]:
    """y of a clique's first row → how many characters its word may take, so that it
    ends before the clique's label instead of running under it."""
    room = {}
    for clique_id, name, y0, _ in runs:
        if clique_id is not None:
            label_w = len(name[-12:]) * LABEL_CHAR_W
            room[y0] = max(4, int((WIDTH - 4 - label_w - 4 - TEXT_X) / CHAR_W))
    return room


@register.simple_tag
def rack_svg(rack: RackView) -> SafeString:
    """The elevation of one rack as inline SVG."""
    rows = _rows(rack)
    height = TOP + sum(ROW if kind == "compute" else SWITCH_ROW for kind, _ in rows) + 4
    # An image's children are presentational: a drawing whose trays are links is a group
    # of them (a role="img" around links is nested interaction, unusable by keyboard).
    linked = any(t.url or (t.domain and t.domain.url) for t in rack.trays.values())
    parts = [
        f'<svg class="rack" viewBox="0 0 {WIDTH} {height}" '
        f'role="{"group" if linked else "img"}" '
        f'aria-label="Rack {escape(rack.name)}: {rack.free} free trays" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<text x="4" y="15" class="rack-name">{escape(rack.name)}</text>',
    ]
    positions: dict[int, int] = {}
    y = TOP
    for kind, n in rows:  # where each compute tray sits, so its clique's label is known
        if kind == "compute":
            positions[n] = y
        y += ROW if kind == "compute" else SWITCH_ROW
    runs = _clique_runs(rack, positions)
    room = _word_room(runs)
    y = TOP
    for kind, n in rows:
        if kind == "switch":
            parts.append(
                f'<rect x="{GPU_X - 2}" y="{y}" width="{WIDTH - GPU_X - 2}" '
                f'height="{SWITCH_ROW - 1}" class="switch">'
                f"<title>NVLink switch tray {n}</title></rect>"
            )
            y += SWITCH_ROW
            continue
        parts.append(_tray(rack.trays.get(n), n, y, room.get(y, 20)))
        y += ROW
    parts.append(_clique_outlines(runs))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated value is escaped


@register.simple_tag
def rack_defs() -> SafeString:
    """The fill patterns every rack drawing refers to: once per page, not once per rack."""
    return mark_safe(  # noqa: S308 - a constant
        '<svg class="rack-defs" width="0" height="0" aria-hidden="true" focusable="false" '
        f'xmlns="http://www.w3.org/2000/svg">{DEFS}</svg>'
    )


@register.filter
def percent(used: int | None, limit: int | None) -> int:
    """Share of a quota in use, 0-100, for the width of a bar."""
    if not limit:
        return 0
    return min(100, round(100 * (used or 0) / limit))


@register.filter
def percent5(used: int | None, limit: int | None) -> int:
    """`percent` to the nearest 5, naming one of the bar-width classes (`w0` … `w100`): a
    class, not an inline style, so the page keeps working under a strict style-src."""
    share = percent(used, limit)
    return 5 * round(share / 5) if share < 100 else 100
