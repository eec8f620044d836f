"""Server-side SVG rack drawings for tenants and approvers (in the manner of NetBox's
elevations), one per rack: where a request would land, or where a domain runs.

The same colour system as the Fleet's elevations (`portal.web.elevation`): a tray's *state*
is its fill (free, in use, cordoned, draining, down, not ready), and cordoned, draining,
down and not-ready trays also carry the same pattern swatch and their state in words, so
nothing is told by colour alone; a *domain* is an outline around its trays plus its name
written on each. A down tray is drawn down whoever holds it. Trays of other tenants are an
anonymous "in use", with no outline. The trays a request would land on are outlined
dashed and marked "▶ lands here"; a domain's own trays are marked "▶ <name>". Cliques are
brackets in the gutter, as on the Fleet. Built as one string: a page of racks must render
in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from portal.web import elevation
from portal.web.elevation import OUTLINES, SWATCH, tray_kind
from portal.web.fabric import RackView, TrayView

register = template.Library()

WIDTH = 250
ROW = 18  # compute tray height
SWITCH_ROW = 7
TOP = 22
LEFT = 30  # slot numbers end here; the clique bracket is left of them
BODY_X = LEFT + 2
GPU_X = BODY_X + 11  # after the state swatch
GPU_W = 22
TEXT_X = GPU_X + 4 * (GPU_W + 2) + 4
WORD_CHARS = 21  # 9 px text between TEXT_X and the right edge

GPU_MARK = {
    "healthy": ("#ffffff", ""),
    "degraded": ("#fdba74", "!"),
    "failed": ("#7f1d1d", "\u00d7"),
}
# The state a tray's fill shows (`elevation.tray_kind`) → its fill class (static/css).
FILL_CLASS = {"free": "st-free", "in use": "st-used"}


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


def _word(tray: TrayView, kind: str) -> str:
    """What is written on the tray: its domain's name (with its state when flagged), or its
    state; "▶" marks the trays a request would land on or the domain's own."""
    if tray.domain is not None:
        word = tray.domain.label
        if kind not in ("free", "in use"):  # serves a domain and is flagged: say both
            word = f"{kind if kind != 'notready' else tray.status_word} · {word}"
    else:
        word = tray.status_word
    if tray.highlight:
        word = "▶ lands here" if tray.preview and tray.domain is None else f"▶ {word}"
    return word if len(word) <= WORD_CHARS else word[: WORD_CHARS - 1] + "…"


def _tray(tray: TrayView | None, slot: int, y: int) -> str:
    gutter = f'<text x="{LEFT - 3}" y="{y + 12}" class="slot">{slot:02d}</text>'
    if tray is None:
        return (
            f'<g class="tray empty">{gutter}'
            f'<rect x="{BODY_X}" y="{y}" width="{WIDTH - BODY_X - 2}" height="{ROW - 2}" '
            f'class="empty-slot"/><text x="{TEXT_X}" y="{y + 12}" class="word">empty</text></g>'
        )
    kind = tray_kind(tray)
    classes = f"tray status-{tray.status} state-{tray.state} k-{kind.replace(' ', '-')}"
    classes += " highlight" if tray.highlight else ""
    parts = [
        f'<g class="{classes}" data-hostname="{escape(tray.hostname)}" '
        f'data-status="{tray.status}" data-kind="{kind}"><title>{_hover(tray)}</title>',
        gutter,
        f'<rect x="{BODY_X}" y="{y}" width="{WIDTH - BODY_X - 2}" height="{ROW - 2}" '
        f'class="tray-bg {FILL_CLASS.get(kind, f"st-{kind}")}"/>',
    ]
    if kind in SWATCH:
        parts.append(
            f'<rect x="{BODY_X}" y="{y}" width="8" height="{ROW - 2}" '
            f'fill="{SWATCH[kind]}" class="state-flag"/>'
        )
    for i, gpu in enumerate(tray.gpus[:4]):
        colour, mark = GPU_MARK.get(gpu.health, ("#d4d4d8", "?"))
        x = GPU_X + i * (GPU_W + 2)
        parts.append(
            f'<rect x="{x}" y="{y + 3}" width="{GPU_W}" height="{ROW - 8}" fill="{colour}" '
            f'class="gpu gpu-{gpu.health}"/>'
        )
        if mark:
            parts.append(f'<text x="{x + GPU_W / 2}" y="{y + 12}" class="gpu-mark">{mark}</text>')
    word = escape(_word(tray, kind))
    parts.append(f'<text x="{TEXT_X}" y="{y + 12}" class="word">{word}</text></g>')
    body = "".join(parts)
    url = tray.domain.url if (tray.domain and tray.domain.url and not tray.url) else tray.url
    if url:
        body = f'<a href="{escape(url)}">{body}</a>'
    return body


# A run of trays drawn one under another with the same key: (key, first y, last y).
Run = tuple[int, int, int]


def _runs(
    rack: RackView, positions: dict[int, int], key: Callable[[TrayView], int | None]
) -> list[Run]:
    runs: list[Run] = []
    previous_y = None
    for slot in sorted(positions):
        tray = rack.trays.get(slot)
        value = key(tray) if tray is not None else None
        y = positions[slot]
        adjacent = previous_y is not None and y - previous_y == ROW
        if value is not None and runs and runs[-1][0] == value and adjacent:
            runs[-1] = (value, runs[-1][1], y)
        elif value is not None:
            runs.append((value, y, y))
        previous_y = y
    return runs


def _domain_key(tray: TrayView) -> int | None:
    """A domain the viewer may name (not another tenant's anonymous "in use")."""
    return tray.domain.domain_id if tray.domain is not None and tray.domain.uid else None


def _landing_key(tray: TrayView) -> int | None:
    return 1 if tray.highlight and tray.preview and tray.domain is None else None


def _outlines(rack: RackView, positions: dict[int, int]) -> str:
    """Each domain's trays outlined in its colour; where a request would land, dashed."""
    out = []
    for domain_id, y0, y1 in _runs(rack, positions, _domain_key):
        colour = OUTLINES[domain_id % len(OUTLINES)]
        out.append(
            f'<rect x="{BODY_X + 1}" y="{y0 + 0.5}" width="{WIDTH - BODY_X - 4}" '
            f'height="{y1 - y0 + ROW - 3}" class="do" stroke="{colour}"/>'
        )
    for _, y0, y1 in _runs(rack, positions, _landing_key):
        out.append(
            f'<rect x="{BODY_X + 1}" y="{y0 + 0.5}" width="{WIDTH - BODY_X - 4}" '
            f'height="{y1 - y0 + ROW - 3}" class="landing"/>'
        )
    return "".join(out)


def _clique_brackets(rack: RackView, positions: dict[int, int]) -> str:
    names = {t.clique_id: t.clique_name for t in rack.trays.values()}
    out = []
    for clique_id, y0, y1 in _runs(rack, positions, lambda t: t.clique_id):
        bottom = y1 + ROW - 2
        name = names.get(clique_id, "")
        label = name.removeprefix(f"{rack.name}-")
        room = max(2, int((bottom - y0) / 5))
        label = label if len(label) <= room else "…" + label[-(room - 1) :]
        out.append(
            f'<g class="cq"><title>clique {escape(name)}</title>'
            f'<path d="M12 {y0 + 1}H8V{bottom - 1}H12" class="cqb"/>'
            f'<text transform="translate(5 {(y0 + bottom) / 2}) rotate(-90)" class="cql">'
            f"{escape(label)}</text></g>"
        )
    return "".join(out)


@register.simple_tag
def rack_svg(rack: RackView) -> SafeString:
    """The drawing of one rack as inline SVG."""
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
    for kind, n in rows:
        if kind == "switch":
            parts.append(
                f'<rect x="{BODY_X}" y="{y}" width="{WIDTH - BODY_X - 2}" '
                f'height="{SWITCH_ROW - 1}" class="switch">'
                f"<title>NVLink switch tray {n}</title></rect>"
            )
            y += SWITCH_ROW
            continue
        positions[n] = y
        parts.append(_tray(rack.trays.get(n), n, y))
        y += ROW
    parts.append(_outlines(rack, positions))
    parts.append(_clique_brackets(rack, positions))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated value is escaped


@register.simple_tag
def rack_defs() -> SafeString:
    """The fill patterns every rack drawing refers to (the Fleet's own): once per page."""
    return elevation.defs()


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
