"""The rack drawings for tenants and approvers (`portal.web.elevation` in its tenants'
mode: where a request would land, or where a domain runs) and the small words the tray and
domain pages share."""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from portal.web import elevation, figures
from portal.web import fabric as views

register = template.Library()


@register.filter
def daemon_word(daemon_state: str, tray_state: str) -> str:
    """The IMEX daemon's state as a page may say it (`fabric.daemon_word`)."""
    return views.daemon_word(daemon_state, tray_state)


@register.filter
def first_line(text: str) -> str:
    """An agent's words up to the first newline (what follows is a log's last lines)."""
    return (text or "").split("\n", 1)[0]


@register.filter
def after_first_line(text: str) -> str:
    return (text or "").partition("\n")[2]


@register.simple_tag
def rack_svg(rack: views.RackView) -> SafeString:
    """The drawing of one rack as inline SVG, as a tenant may see it."""
    return elevation.elevation(rack, now=timezone.now(), mode=elevation.TENANT)


@register.simple_tag
def rack_defs() -> SafeString:
    """The fill patterns every rack drawing refers to (the Fleet's own): once per page."""
    return figures.defs()


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
