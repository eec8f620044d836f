"""Links to incidents from the pages that show a tray or the fleet (one query each)."""

from __future__ import annotations

from django import template

from domains.computedomains.models import Incident
from domains.inventory.models import Node

register = template.Library()


@register.simple_tag
def open_incident_count() -> int:
    """How many trays are down in an open incident now (the Fleet's summary)."""
    return Incident.objects.filter(ended_at=None).count()


@register.simple_tag
def tray_incident(node: Node) -> Incident | None:
    """The tray's open incident, else its last one, else None (the tray page links it)."""
    return (
        Incident.objects.filter(node=node)
        .order_by("-started_at", "-id")
        .only("pk", "started_at", "ended_at")
        .first()
    )
