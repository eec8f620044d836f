"""The Fleet's rack elevations: every slot of a GB200 NVL72 rack drawn as it sits, top to
bottom — power shelves, compute trays 1-10, the nine NVLink switch trays, compute trays
11-18, power shelves — each with its label.

One colour system: a tray's *state* is its fill (free, in use, cordoned, draining, down,
not ready), and cordoned, draining, down and not-ready trays also carry a pattern swatch
and the word, so nothing is told by colour alone; a *domain* is an outline around its
trays plus its name written on each. Maintenance windows are a band at the rack's right
edge over the trays they cover, solid while under way, hatched while ahead, and "maint."
in the trays' words. Switch trays and power shelves missing from the inventory are drawn
from the rack model's known layout, dashed and marked "not inventoried".

Built as one string (like `templatetags.racks`): a page of racks must cost milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from domains.inventory.parts import POWER, SWITCH, Part, WindowMark
from domains.placement.model import CliqueSummary, TrayStatus
from portal.web.fabric import DomainTag, RackView, TrayView

# How many power shelves each rack model has (a rack records its compute and switch slots).
POWER_SHELVES = {"gb200-nvl72": 8}
UPPER_COMPUTE = 10  # compute trays above the switch trays in an NVL72

WIDTH = 340
X0, X1 = 42, 322  # the slot body; the gutter holds the clique bracket and slot numbers
BAND_X = 327  # the maintenance band
ROW = {"compute": 18, SWITCH: 12, POWER: 11}
TOP = 4
GPU_X = X0 + 84
WORD_X = X0 + 142
WORD_CHARS = 22  # 10.5 px bold in the 138 px left of the maintenance band

# Tray status → (fill class, swatch pattern or "", the word's state).
FILL = {
    TrayStatus.FREE: "st-free",
    TrayStatus.IN_USE: "st-used",
    TrayStatus.CORDONED: "st-cordoned",
    TrayStatus.DRAINING: "st-draining",
    TrayStatus.DOWN: "st-down",
}
SWATCH = {
    "cordoned": "url(#el-cordoned)",
    "draining": "url(#el-draining)",
    "down": "url(#el-down)",
    "notready": "url(#el-notready)",
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
    '<pattern id="el-maint" width="4" height="4" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="4" height="4" fill="#ede9fe"/>'
    '<line x1="0" y1="0" x2="0" y2="4" stroke="#5b21b6" stroke-width="2"/></pattern>'
    "</defs>"
)

GPU_MARK = {
    "healthy": ("g-ok", ""),
    "degraded": ("g-degraded", "!"),
    "failed": ("g-failed", "\u00d7"),
}


def defs() -> SafeString:
    """The patterns every elevation refers to, once per page."""
    return mark_safe(  # noqa: S308 - a constant
        '<svg class="el-defs" width="0" height="0" aria-hidden="true" focusable="false" '
        f'xmlns="http://www.w3.org/2000/svg">{DEFS}</svg>'
    )


def tray_kind(tray: TrayView) -> str:
    """The state a tray's fill and swatch show: the operator's flag wins over "in use"."""
    if tray.state in ("cordoned", "draining", "down"):
        return tray.state
    if tray.status in FILL:
        return FILL[tray.status].removeprefix("st-").replace("used", "in use")
    return "notready"


def rows(rack: RackView) -> list[tuple[str, int]]:
    """Top to bottom: (kind, number) for every slot of the rack."""
    shelves = max(
        POWER_SHELVES.get(rack.kind, 0),
        max((p.number for p in rack.parts if p.kind == POWER), default=0),
    )
    top_shelves = (shelves + 1) // 2
    upper = min(UPPER_COMPUTE, rack.compute_slots)
    out = [(POWER, n) for n in range(1, top_shelves + 1)]
    out += [("compute", n) for n in range(1, upper + 1)]
    out += [(SWITCH, n) for n in range(1, rack.switch_slots + 1)]
    out += [("compute", n) for n in range(upper + 1, rack.compute_slots + 1)]
    out += [(POWER, n) for n in range(top_shelves + 1, shelves + 1)]
    return out


def elevation(rack: RackView, *, now: datetime) -> SafeString:
    """One rack's elevation as inline SVG (a group of links when its slots are links)."""
    layout = rows(rack)
    y, positions = TOP, []
    for kind, n in layout:
        positions.append((kind, n, y))
        y += ROW[kind]
    height = y + TOP
    parts = {(p.kind, p.number): p for p in rack.parts}
    maint = _maintenance_by_tray(rack.windows, now)
    body: list[str] = []
    for kind, n, top in positions:
        if kind == "compute":
            body.append(_compute(rack, n, top, maint))
        else:
            body.append(_part(rack, kind, n, parts.get((kind, n)), top))
    trays_y = {n: top for kind, n, top in positions if kind == "compute"}
    body.append(_domain_outlines(rack, trays_y))
    body.append(_clique_brackets(rack, trays_y))
    body.append(_maintenance_bands(rack, trays_y, now))
    linked = bool(rack.url) or any(t.url for t in rack.trays.values())
    free = rack.free
    label = (
        f"Rack {rack.name} elevation: {len(rack.trays)} compute trays, {free} free, "
        f"{rack.switch_slots} NVLink switch trays, power shelves"
    )
    return mark_safe(  # noqa: S308 - every interpolated value is escaped
        f'<svg class="el" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'role="{"group" if linked else "img"}" aria-label="{escape(label)}" '
        f'data-rack="{escape(rack.name)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def _maintenance_by_tray(windows: Iterable[WindowMark], now: datetime) -> dict[int, str]:
    """tray id → its word: "maint." while a window is under way, "maint. HH:MM" before."""
    words: dict[int, str] = {}
    for w in windows:
        word = "maint." if w.active(now) else f"maint. {w.starts_at:%H:%M}"
        for node_id in w.node_ids:
            if node_id not in words or w.active(now):
                words[node_id] = word
    return words


def _compute(rack: RackView, slot: int, y: int, maint: dict[int, str]) -> str:
    tray = rack.trays.get(slot)
    h = ROW["compute"] - 2
    gutter = f'<text x="{X0 - 4}" y="{y + 12}" class="sl">{slot:02d}</text>'
    if tray is None:
        return (
            f'<g class="t empty" data-slot="{slot}">{gutter}<rect x="{X0}" y="{y}" '
            f'width="{X1 - X0}" height="{h}" class="st-empty"/><text x="{X0 + 14}" y="{y + 12}" '
            f'class="w">empty compute slot {slot}</text></g>'
        )
    kind = tray_kind(tray)
    words = [tray.domain.label] if tray.domain is not None else []
    state_word = {"in use": "", "notready": tray.status_word}.get(kind, kind)
    if state_word and not (kind == "in use" and words):
        words.insert(0, state_word)
    # "maint." where it fits: the band beside the tray, its hover and the notes beside the
    # rack say it in any case.
    if tray.node_id in maint and len(" · ".join([*words, maint[tray.node_id]])) <= WORD_CHARS:
        words.append(maint[tray.node_id])
    word = " · ".join(words) or "in use"
    word = word if len(word) <= WORD_CHARS else word[: WORD_CHARS - 1] + "…"
    dim = rack.matches is not None and tray.node_id not in rack.matches
    fill = {"free": "st-free", "in use": "st-used"}.get(kind, f"st-{kind}")
    name = tray.hostname if len(tray.hostname) <= 12 else tray.hostname[:11] + "…"
    out = [
        f'<g class="t k-{kind.replace(" ", "-")}{" dim" if dim else ""}" '
        f'data-hostname="{escape(tray.hostname)}" data-slot="{slot}" '
        f'data-status="{tray.status}" data-state="{tray.state}">{gutter}',
        f'<rect x="{X0}" y="{y}" width="{X1 - X0}" height="{h}" class="tf {fill}"/>',
    ]
    if kind in SWATCH:
        out.append(f'<rect x="{X0}" y="{y}" width="10" height="{h}" fill="{SWATCH[kind]}"/>')
    out.append(f'<text x="{X0 + 14}" y="{y + 12}" class="hn">{escape(name)}</text>')
    out.extend(_gpus(tray, y))
    out.append(f'<text x="{WORD_X}" y="{y + 12}" class="w">{escape(word)}</text></g>')
    body = "".join(out)
    if tray.url:
        # The link's name is its <title> (first child), which holds the words drawn on the
        # tray: an aria-label would not, as SVG text pieces run together (WCAG 2.5.3).
        body = f'<a href="{escape(tray.url)}"><title>{_hover(tray, maint)}</title>{body}</a>'
    else:
        body = body.replace(">", f"><title>{_hover(tray, maint)}</title>", 1)
    return body


def _gpus(tray: TrayView, y: int) -> list[str]:
    out = []
    for i, gpu in enumerate(tray.gpus[:4]):
        css, mark = GPU_MARK.get(gpu.health, ("g-unknown", "?"))
        x = GPU_X + i * 13
        out.append(f'<rect x="{x}" y="{y + 3}" width="11" height="10" class="g {css}"/>')
        if mark:
            out.append(f'<text x="{x + 5.5}" y="{y + 11.5}" class="gm">{mark}</text>')
    return out


def _hover(tray: TrayView, maint: dict[int, str]) -> str:
    lines = [f"{tray.hostname} (slot {tray.slot}): {tray.state}, {tray.status_word}"]
    if tray.domain:
        lines.append(f"domain: {tray.domain.label}")
    if tray.clique_name:
        lines.append(f"clique: {tray.clique_name}")
    bad = [f"GPU{g.index} {g.health}" for g in tray.gpus if g.health != "healthy"]
    lines.append("GPUs: " + (", ".join(bad) if bad else f"{len(tray.gpus)} healthy"))
    if tray.node_id in maint:
        lines.append(f"maintenance: {maint[tray.node_id]}")
    beat = tray.last_heartbeat
    lines.append(f"heartbeat: {timesince(beat)} ago" if beat else "heartbeat: never")
    return escape("\n".join(lines))


def _part(rack: RackView, kind: str, n: int, part: Part | None, y: int) -> str:
    h = ROW[kind] - 1
    what = f"NVLink switch tray {n}" if kind == SWITCH else f"Power shelf {n}"
    short = f"S{n}" if kind == SWITCH else f"P{n}"
    if part is None:
        state, css, title = "not inventoried", "pf-none", f"{what}: not inventoried"
        title += f" (drawn from the {rack.kind or 'rack'} layout)"
    else:
        state = "down" if part.state == "down" else "OK"
        css = "pf-down" if part.state == "down" else f"pf-{kind}"
        title = f"{what} ({part.name}): {state}" + (f", {part.reason}" if part.reason else "")
        if part.watts:
            what += f" · {part.watts / 1000:g} kW"
    text_y = y + h - 2.8
    body = (
        f'<g class="p p-{kind}" data-part="{escape(part.name if part else short)}">'
        f"<title>{escape(title)}</title>"
        f'<text x="{X0 - 4}" y="{text_y}" class="sl sl-p">{short}</text>'
        f'<rect x="{X0}" y="{y}" width="{X1 - X0}" height="{h}" class="pf {css}"/>'
        f'<text x="{X0 + 14}" y="{text_y}" class="pw">{escape(what)}</text>'
        f'<text x="{X1 - 4}" y="{text_y}" class="pw ps">{state}</text></g>'
    )
    if part is not None and rack.url:
        kind_name = "switch_tray" if kind == SWITCH else "power_shelf"
        url = reverse("operator:impact", args=[kind_name, part.name])
        body = f'<a href="{escape(url)}"><title>{escape(title)}</title>{body}</a>'
    return body


def _runs(
    rack: RackView, trays_y: dict[int, int], key: Callable[[TrayView], int | None]
) -> list[tuple[int, int, int]]:
    """Runs of trays drawn one under another with the same `key(tray)` (None: no run)."""
    runs: list[tuple[int, int, int]] = []
    previous = None
    for slot in sorted(trays_y):
        tray = rack.trays.get(slot)
        value = key(tray) if tray is not None else None
        y = trays_y[slot]
        adjacent = previous is not None and y - previous == ROW["compute"]
        if value is not None and runs and runs[-1][0] == value and adjacent:
            runs[-1] = (value, runs[-1][1], y)
        elif value is not None:
            runs.append((value, y, y))
        previous = y
    return runs


def _domain_outlines(rack: RackView, trays_y: dict[int, int]) -> str:
    out = []
    for value, y0, y1 in _runs(rack, trays_y, lambda t: t.domain.domain_id if t.domain else None):
        colour = OUTLINES[value % len(OUTLINES)]
        out.append(
            f'<rect x="{X0 + 1}" y="{y0 + 0.5}" width="{X1 - X0 - 2}" '
            f'height="{y1 - y0 + ROW["compute"] - 3}" class="do" stroke="{colour}"/>'
        )
    return "".join(out)


def _clique_brackets(rack: RackView, trays_y: dict[int, int]) -> str:
    names = {t.clique_id: t.clique_name for t in rack.trays.values()}
    out = []
    for value, y0, y1 in _runs(rack, trays_y, lambda t: t.clique_id):
        bottom = y1 + ROW["compute"] - 2
        middle = (y0 + bottom) / 2
        name = names.get(value, "")
        # Along the bracket, the name without its rack's ("gb-r02-c1" → "c1"); the notes
        # beside the rack and the bracket's hover give it whole.
        label = name.removeprefix(f"{rack.name}-")
        room = max(2, int((bottom - y0) / 5.5))  # characters of 9 px text along the bracket
        label = label if len(label) <= room else "…" + label[-(room - 1) :]
        out.append(
            f'<g class="cq"><title>clique {escape(name)}</title>'
            f'<path d="M16 {y0 + 1}H12V{bottom - 1}H16" class="cqb"/>'
            f'<text transform="translate(9 {middle}) rotate(-90)" class="cql">'
            f"{escape(label)}</text>"
            "</g>"
        )
    return "".join(out)


def _maintenance_bands(rack: RackView, trays_y: dict[int, int], now: datetime) -> str:
    out = []
    for w in rack.windows:
        when = f"{w.starts_at:%Y-%m-%d %H:%M} to {w.ends_at:%H:%M} UTC"
        state = "under way" if w.active(now) else "ahead"
        for _, y0, y1 in _runs(rack, trays_y, _covered_by(w)):
            fill = "#5b21b6" if w.active(now) else "url(#el-maint)"
            out.append(
                f'<rect x="{BAND_X}" y="{y0}" width="9" height="{y1 - y0 + ROW["compute"] - 2}" '
                f'fill="{fill}" class="mb" data-window="{w.window_id}">'
                f"<title>Maintenance {state}: {escape(w.reason)}, {when}</title></rect>"
            )
    return "".join(out)


def domain_key(tag: DomainTag) -> SafeString:
    colour = OUTLINES[tag.domain_id % len(OUTLINES)]
    return mark_safe(  # noqa: S308 - a constant colour
        '<svg class="dkey" viewBox="0 0 12 12" width="12" height="12" aria-hidden="true">'
        f'<rect x="1" y="1" width="10" height="10" class="st-used do" stroke="{colour}"/></svg>'
    )


def _covered_by(window: WindowMark) -> Callable[[TrayView], int | None]:
    return lambda tray: 1 if tray.node_id in window.node_ids else None


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
