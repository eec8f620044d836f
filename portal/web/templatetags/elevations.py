"""The Fleet's drawings in templates: rack elevations, clique bars and trend lines."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from domains.computedomains.trends import Series
from domains.placement.model import CliqueSummary
from portal.web import elevation as drawing
from portal.web import figures
from portal.web.fabric import DomainTag, RackView
from portal.web.sparkline import figure, sparkline

register = template.Library()


@register.simple_tag
def elevation_defs() -> SafeString:
    return figures.defs()


@register.simple_tag
def elevation(rack: RackView, now: datetime | None = None) -> SafeString:
    return drawing.elevation(rack, now=now or timezone.now())


@register.simple_tag
def clique_bar(summary: CliqueSummary) -> SafeString:
    return figures.clique_bar(summary)


@register.simple_tag
def trend(series: Series) -> SafeString:
    return sparkline(series)


@register.filter
def trend_figure(series: Series, which: str = "last") -> str:
    """The series' latest value ("last") or its peak ("peak"), with its unit for seconds."""
    return figure(series.peak if which == "peak" else series.last, series.unit)


@register.simple_tag
def domain_key(tag: DomainTag) -> SafeString:
    """A small square in the outline colour a domain has on the elevations."""
    return figures.domain_key(tag.domain_id)
