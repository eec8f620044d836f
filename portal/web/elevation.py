"""Rack elevations: every slot of a GB200 NVL72 rack drawn as it sits, top to bottom, for
two audiences from one renderer (in the manner of NetBox's elevations).

The operators' mode (the Fleet, the rack and clique pages) draws the whole rack: power
shelves, compute trays 1-10, the nine NVLink switch trays, compute trays 11-18, power
shelves, each with its label. Maintenance windows are a band at the rack's right edge over
the trays they cover, solid while under way, hatched while ahead, and "maint." in the
trays' words. Switch trays and power shelves missing from the inventory are drawn from the
rack model's known layout, dashed and marked "not inventoried".

The tenants' mode (request preview, approvals, a domain's page) draws the compute trays and
switch trays, smaller: trays of other tenants are an anonymous "in use" with no outline
(the `RackView` a tenant is given already says no more); the trays a request would land on
are outlined dashed and marked "▶ lands here"; a domain's own trays are marked "▶ <name>".

Both share one colour system (`portal.web.figures`): state is a tray's fill, a domain is an
outline plus its name. Built as one string: a page of racks must cost milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from domains.inventory.gpuhealth import MARKS
from domains.inventory.parts import POWER, SWITCH, Part, WindowMark
from domains.placement.model import TrayStatus
from portal.web.fabric import RackView, TrayView, daemon_word
from portal.web.figures import FILL, GPU_MARK, OUTLINES, SWATCH, outline

__all__ = ["OPERATOR", "OUTLINES", "TENANT", "Mode", "elevation", "rows", "tray_kind"]

# How many power shelves each rack model has (a rack records its compute and switch slots).
POWER_SHELVES = {"gb200-nvl72": 8}
UPPER_COMPUTE = 10  # compute trays above the switch trays in an NVL72


@dataclass(frozen=True)
class Mode:
    """How one audience's drawing is laid out and which stylesheet classes it wears."""

    tenant: bool
    width: int
    x0: int  # the slot body; the gutter left of it holds the clique bracket and slot numbers
    x1: int
    top: int  # above the first slot (the tenants' drawing writes the rack's name there)
    row: Mapping[str, int]  # slot kind → its height
    gpu_x: int
    gpu_w: int
    word_x: int
    word_chars: int  # what fits between word_x and the right edge (or the band)
    swatch_w: int
    bracket_x: int  # the clique bracket's spine
    bracket_char: float  # px per character of the clique's label along the bracket
    css: Mapping[str, str]  # role → class (each audience's stylesheet names its own)


OPERATOR = Mode(
    tenant=False,
    width=340,
    x0=42,
    x1=322,
    top=4,
    row={"compute": 18, SWITCH: 12, POWER: 11},
    gpu_x=42 + 84,
    gpu_w=11,
    word_x=42 + 142,
    word_chars=22,  # 10.5 px bold in the 138 px left of the maintenance band
    swatch_w=10,
    bracket_x=12,
    bracket_char=5.5,
    css={"svg": "el", "tray": "t", "fill": "tf", "flag": "", "slot": "sl", "word": "w",
         "gpu": "g", "mark": "gm", "empty": "st-empty"},
)  # fmt: skip
TENANT = Mode(
    tenant=True,
    width=250,
    x0=32,
    x1=248,
    top=22,
    row={"compute": 18, SWITCH: 7},
    gpu_x=43,
    gpu_w=22,
    word_x=43 + 4 * 24 + 4,
    word_chars=21,  # 9 px text between word_x and the right edge
    swatch_w=8,
    bracket_x=8,
    bracket_char=5,
    css={"svg": "rack", "tray": "tray", "fill": "tray-bg", "flag": "state-flag",
         "slot": "slot", "word": "word", "gpu": "gpu", "mark": "gpu-mark",
         "empty": "empty-slot"},
)  # fmt: skip
BAND_X = 327  # the maintenance band (operators' mode)


def tray_kind(tray: TrayView) -> str:
    """The state a tray's fill and swatch show: its one status (`traytruth`), in which the
    operator's flag and a silent agent win over "in use"."""
    if tray.status in FILL:
        return FILL[tray.status].removeprefix("st-").replace("used", "in use")
    if tray.state in ("cordoned", "draining", "down"):  # a tray placement does not see
        return tray.state
    return "notready"


def rows(rack: RackView, mode: Mode = OPERATOR) -> list[tuple[str, int]]:
    """Top to bottom: (kind, number) for every slot the mode draws."""
    shelves = 0
    if not mode.tenant:
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


def elevation(rack: RackView, *, now: datetime, mode: Mode = OPERATOR) -> SafeString:
    """One rack's drawing as inline SVG (a group of links when its slots are links)."""
    y, trays_y, body = mode.top, {}, []
    parts = {(p.kind, p.number): p for p in rack.parts}
    maint = {} if mode.tenant else _maintenance_by_tray(rack.windows, now)
    for kind, n in rows(rack, mode):
        if kind == "compute":
            trays_y[n] = y
            body.append(_compute(rack, n, y, maint, mode))
        elif mode.tenant:
            body.append(_switch(n, y, mode))
        else:
            body.append(_part(rack, kind, n, parts.get((kind, n)), y))
        y += mode.row[kind]
    body.append(_outlines(rack, trays_y, mode))
    body.append(_clique_brackets(rack, trays_y, mode))
    if not mode.tenant:
        body.append(_maintenance_bands(rack, trays_y, now))
    # An image's children are presentational: a drawing whose trays are links is a group
    # of them (a role="img" around links is nested interaction, unusable by keyboard).
    linked = bool(rack.url) or any(_url(t) for t in rack.trays.values())
    return mark_safe(  # noqa: S308 - every interpolated value is escaped
        _open(rack, mode, y + 4, linked) + "".join(body) + "</svg>"
    )


def _open(rack: RackView, mode: Mode, height: int, linked: bool) -> str:
    role = "group" if linked else "img"
    if mode.tenant:
        return (
            f'<svg class="rack" viewBox="0 0 {mode.width} {height}" role="{role}" '
            f'aria-label="Rack {escape(rack.name)}: {rack.free} free trays" '
            'xmlns="http://www.w3.org/2000/svg">'
            f'<text x="4" y="15" class="rack-name">{escape(rack.name)}</text>'
        )
    label = (
        f"Rack {rack.name} elevation: {len(rack.trays)} compute trays, {rack.free} free, "
        f"{rack.switch_slots} NVLink switch trays, power shelves"
    )
    return (
        f'<svg class="el" viewBox="0 0 {mode.width} {height}" width="{mode.width}" '
        f'height="{height}" role="{role}" aria-label="{escape(label)}" '
        f'data-rack="{escape(rack.name)}" xmlns="http://www.w3.org/2000/svg">'
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


def _url(tray: TrayView) -> str:
    """Where a tray leads: its own page (operators), else its domain's (a tenant's own)."""
    return tray.url or (tray.domain.url if tray.domain is not None else "")


def _compute(rack: RackView, slot: int, y: int, maint: dict[int, str], mode: Mode) -> str:
    tray = rack.trays.get(slot)
    h, css = mode.row["compute"] - 2, mode.css
    gutter = f'<text x="{mode.x0 - 4}" y="{y + 12}" class="{css["slot"]}">{slot:02d}</text>'
    if tray is None:
        what = "empty" if mode.tenant else f"empty compute slot {slot}"
        at = "" if mode.tenant else f' data-slot="{slot}"'
        return (
            f'<g class="{css["tray"]} empty"{at}>'
            f'{gutter}<rect x="{mode.x0}" '
            f'y="{y}" width="{mode.x1 - mode.x0}" height="{h}" class="{css["empty"]}"/>'
            f'<text x="{mode.word_x if mode.tenant else mode.x0 + 14}" y="{y + 12}" '
            f'class="{css["word"]}">{what}</text></g>'
        )
    kind = tray_kind(tray)
    dim = rack.matches is not None and tray.node_id not in rack.matches
    classes = f"{css['tray']} k-{kind.replace(' ', '-')}{' dim' if dim else ''}"
    classes += f" status-{tray.status} state-{tray.state}"
    classes += " highlight" if tray.highlight else ""
    classes += " has-gpu-alert" if tray.alert_kinds else ""
    fill = {"free": "st-free", "in use": "st-used"}.get(kind, f"st-{kind}")
    out = [
        f'<g class="{classes}" data-hostname="{escape(tray.hostname)}" {_data(tray, kind, mode)}>'
        f"{gutter}",
        f'<rect x="{mode.x0}" y="{y}" width="{mode.x1 - mode.x0}" height="{h}" '
        f'class="{css["fill"]} {fill}"/>',
    ]
    if kind in SWATCH:
        flag = f' class="{css["flag"]}"' if css["flag"] else ""
        out.append(
            f'<rect x="{mode.x0}" y="{y}" width="{mode.swatch_w}" height="{h}" '
            f'fill="{SWATCH[kind]}"{flag}/>'
        )
    if not mode.tenant:
        name = tray.hostname if len(tray.hostname) <= 12 else tray.hostname[:11] + "…"
        out.append(f'<text x="{mode.x0 + 14}" y="{y + 12}" class="hn">{escape(name)}</text>')
    out.extend(_gpus(tray, y, mode))
    word = escape(_word(tray, kind, maint, mode))
    out.append(f'<text x="{mode.word_x}" y="{y + 12}" class="{css["word"]}">{word}</text></g>')
    body, url = "".join(out), _url(tray)
    if url:
        # The link's name is its <title> (first child), which holds the words drawn on the
        # tray: an aria-label would not, as SVG text pieces run together (WCAG 2.5.3).
        return f'<a href="{escape(url)}"><title>{_hover(tray, maint)}</title>{body}</a>'
    return body.replace(">", f"><title>{_hover(tray, maint)}</title>", 1)


def _data(tray: TrayView, kind: str, mode: Mode) -> str:
    """The attributes pages and tests find a tray by (a tenant's page has its members'
    `data-state` rows: the drawing names the kind it shows instead)."""
    alerts = f' data-gpu-alerts="{" ".join(tray.alert_kinds)}"' if tray.alert_kinds else ""
    if mode.tenant:
        return f'data-status="{tray.status}" data-kind="{kind}"{alerts}'
    return f'data-slot="{tray.slot}" data-status="{tray.status}" data-state="{tray.state}"{alerts}'


def _word(tray: TrayView, kind: str, maint: dict[int, str], mode: Mode) -> str:
    """What is written on a tray: its state when flagged (or free, or not ready), then its
    domain's name; "maint." where it fits (the band beside the tray, its hover and the
    notes beside the rack say it in any case); in the tenants' mode "▶" marks the trays a
    request would land on or the domain's own."""
    words = [tray.domain.label] if tray.domain is not None else []
    state_word = {"in use": "", "notready": tray.status_word, "silent": "agent silent"}.get(
        kind, kind
    )
    if state_word and not (kind in ("in use", "free") and words):
        words.insert(0, state_word)
    extra = maint.get(tray.node_id)
    if extra and len(" · ".join([*words, extra])) <= mode.word_chars:
        words.append(extra)
    word = " · ".join(words) or "in use"
    if mode.tenant and tray.highlight:
        word = "▶ lands here" if tray.preview and tray.domain is None else f"▶ {word}"
    # Cut last, marker included: what is written must end inside the tray's box.
    return word if len(word) <= mode.word_chars else word[: mode.word_chars - 1] + "…"


def _gpus(tray: TrayView, y: int, mode: Mode) -> list[str]:
    out, cls = [], mode.css["gpu"]
    for i, gpu in enumerate(tray.gpus[:4]):
        health, mark = GPU_MARK.get(gpu.health, ("unknown", "?"))
        if gpu.alerts:  # the health readings' overlay: the most serious alert's letter
            health, mark = "alert", MARKS[gpu.alerts[0].kind]
        x = mode.gpu_x + i * (mode.gpu_w + 2)
        out.append(
            f'<rect x="{x}" y="{y + 3}" width="{mode.gpu_w}" height="10" '
            f'class="{cls} {cls}-{health}"/>'
        )
        if mark:
            out.append(
                f'<text x="{x + mode.gpu_w / 2}" y="{y + 11.5}" class="{mode.css["mark"]}">'
                f"{mark}</text>"
            )
    return out


def _hover(tray: TrayView, maint: dict[int, str]) -> str:
    what = tray.status_word
    if tray.domain is not None and tray.status != TrayStatus.IN_USE:
        what += ", in use"  # flagged (or its agent silent) and held: both
    elif tray.state not in ("ready", tray.status):
        what = f"{tray.state}, {what}"
    lines = [f"{tray.hostname} (slot {tray.slot}): {what}"]
    if tray.domain:
        lines.append(f"domain: {tray.domain.label}")
    if tray.clique_name:
        lines.append(f"clique: {tray.clique_name}")
    bad = [f"GPU{g.index} {g.health}" for g in tray.gpus if g.health != "healthy"]
    lines.append("GPUs: " + (", ".join(bad) if bad else f"{len(tray.gpus)} healthy"))
    lines.extend(tray.gpu_alerts)
    if tray.daemon_state:  # operators only: a tenant is not told other trays' daemons
        lines.append(f"IMEX daemon: {daemon_word(tray.daemon_state, tray.state)}")
    if tray.node_id in maint:
        lines.append(f"maintenance: {maint[tray.node_id]}")
    beat = tray.last_heartbeat
    lines.append(f"heartbeat: {timesince(beat)} ago" if beat else "heartbeat: never")
    if tray.highlight:
        lines.append("the request would land here" if tray.preview else "a tray of this domain")
    return escape("\n".join(lines))


def _switch(n: int, y: int, mode: Mode) -> str:
    """An NVLink switch tray in the tenants' mode: a bar (its state is the operators')."""
    return (
        f'<rect x="{mode.x0}" y="{y}" width="{mode.x1 - mode.x0}" '
        f'height="{mode.row[SWITCH] - 1}" class="switch">'
        f"<title>NVLink switch tray {n}</title></rect>"
    )


def _part(rack: RackView, kind: str, n: int, part: Part | None, y: int) -> str:
    h, x0, x1 = OPERATOR.row[kind] - 1, OPERATOR.x0, OPERATOR.x1
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
        f'<text x="{x0 - 4}" y="{text_y}" class="sl sl-p">{short}</text>'
        f'<rect x="{x0}" y="{y}" width="{x1 - x0}" height="{h}" class="pf {css}"/>'
        f'<text x="{x0 + 14}" y="{text_y}" class="pw">{escape(what)}</text>'
        f'<text x="{x1 - 4}" y="{text_y}" class="pw ps">{state}</text></g>'
    )
    if part is not None and rack.url:
        kind_name = "switch_tray" if kind == SWITCH else "power_shelf"
        url = reverse("operator:impact", args=[kind_name, part.name])
        body = f'<a href="{escape(url)}"><title>{escape(title)}</title>{body}</a>'
    return body


# A run of trays drawn one under another with the same key: (key, first y, last y).
Run = tuple[int, int, int]


def _runs(
    rack: RackView, trays_y: dict[int, int], key: Callable[[TrayView], int | None], row: int
) -> list[Run]:
    """Runs of trays drawn one under another with the same `key(tray)` (None: no run)."""
    runs: list[Run] = []
    previous = None
    for slot in sorted(trays_y):
        tray = rack.trays.get(slot)
        value = key(tray) if tray is not None else None
        y = trays_y[slot]
        adjacent = previous is not None and y - previous == row
        if value is not None and runs and runs[-1][0] == value and adjacent:
            runs[-1] = (value, runs[-1][1], y)
        elif value is not None:
            runs.append((value, y, y))
        previous = y
    return runs


def _domain_key(tray: TrayView) -> int | None:
    """A domain the viewer may name (not another tenant's anonymous "in use")."""
    return tray.domain.domain_id if tray.domain is not None and tray.domain.uid else None


def _landing_key(tray: TrayView) -> int | None:
    return 1 if tray.highlight and tray.preview and tray.domain is None else None


def _outlines(rack: RackView, trays_y: dict[int, int], mode: Mode) -> str:
    """Each domain's trays outlined in its colour; where a request would land, dashed."""
    row, out = mode.row["compute"], []
    box = f'x="{mode.x0 + 1}" width="{mode.x1 - mode.x0 - 2}"'
    for domain_id, y0, y1 in _runs(rack, trays_y, _domain_key, row):
        out.append(
            f'<rect {box} y="{y0 + 0.5}" height="{y1 - y0 + row - 3}" class="do" '
            f'stroke="{outline(domain_id)}"/>'
        )
    if mode.tenant:
        for _, y0, y1 in _runs(rack, trays_y, _landing_key, row):
            out.append(f'<rect {box} y="{y0 + 0.5}" height="{y1 - y0 + row - 3}" class="landing"/>')
    return "".join(out)


def _clique_brackets(rack: RackView, trays_y: dict[int, int], mode: Mode) -> str:
    names = {t.clique_id: t.clique_name for t in rack.trays.values()}
    row, spine, out = mode.row["compute"], mode.bracket_x, []
    for value, y0, y1 in _runs(rack, trays_y, lambda t: t.clique_id, row):
        bottom = y1 + row - 2
        name = names.get(value, "")
        # Along the bracket, the name without its rack's ("gb-r02-c1" → "c1"); the notes
        # beside the rack and the bracket's hover give it whole.
        label = name.removeprefix(f"{rack.name}-")
        room = max(2, int((bottom - y0) / mode.bracket_char))
        label = label if len(label) <= room else "…" + label[-(room - 1) :]
        out.append(
            f'<g class="cq"><title>clique {escape(name)}</title>'
            f'<path d="M{spine + 4} {y0 + 1}H{spine}V{bottom - 1}H{spine + 4}" class="cqb"/>'
            f'<text transform="translate({spine - 3} {(y0 + bottom) / 2}) rotate(-90)" '
            f'class="cql">{escape(label)}</text></g>'
        )
    return "".join(out)


def _maintenance_bands(rack: RackView, trays_y: dict[int, int], now: datetime) -> str:
    out, row = [], OPERATOR.row["compute"]
    for w in rack.windows:
        when = f"{w.starts_at:%Y-%m-%d %H:%M} to {w.ends_at:%H:%M} UTC"
        state = "under way" if w.active(now) else "ahead"
        for _, y0, y1 in _runs(rack, trays_y, _covered_by(w), row):
            fill = "#5b21b6" if w.active(now) else "url(#el-maint)"
            out.append(
                f'<rect x="{BAND_X}" y="{y0}" width="9" height="{y1 - y0 + row - 2}" '
                f'fill="{fill}" class="mb" data-window="{w.window_id}">'
                f"<title>Maintenance {state}: {escape(w.reason)}, {when}</title></rect>"
            )
    return "".join(out)


def _covered_by(window: WindowMark) -> Callable[[TrayView], int | None]:
    return lambda tray: 1 if tray.node_id in window.node_ids else None
