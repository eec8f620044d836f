"""The portal's health for operators: a banner on the Fleet and tray pages saying what is
wrong and which trays (`domains.health`), and on a tray's page what its agent says."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import render

from domains.health.condition import portal_health
from domains.health.trays import tray_trouble
from domains.inventory.models import Node
from portal.web.access import SignedInRequest, operator_required


def health_context(tray: Node | None = None) -> dict[str, Any]:
    """What the banner shows: the condition, and `tray`'s agent's trouble."""
    return {
        "health": portal_health(),
        "trouble": tray_trouble(tray) if tray is not None else None,
        "tray": tray,
    }


@operator_required
def banner(request: SignedInRequest) -> HttpResponse:
    """The banner alone (`?tray=<hostname>`: with that tray's agent's words), re-fetched by
    the pages on every live message and every few seconds (a condition that clears by
    itself, a worker that stopped, sends no message)."""
    hostname = request.GET.get("tray", "")
    tray = Node.objects.filter(hostname=hostname).first() if hostname else None
    return render(request, "operator/_health.html", health_context(tray))
