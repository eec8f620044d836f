"""The operators' versions page: driver, IMEX, agent and VBIOS per tray, the fleet's usual
version of each, and every tray and clique that drifted from it."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render

from domains.inventory.versions import COMPONENTS, fleet_versions
from portal.web.access import SignedInRequest, operator_required

TRAYS_PER_PAGE = 200


@operator_required
def versions(request: SignedInRequest) -> HttpResponse:
    """`?drift=1`: only the trays off the usual versions; `?rack=` one rack's."""
    fleet = fleet_versions()
    only_drift = request.GET.get("drift") == "1"
    rack = request.GET.get("rack", "").strip()
    trays = fleet.drifted if only_drift else fleet.trays
    if rack:
        trays = [t for t in trays if t.rack == rack]
    page = Paginator(trays, TRAYS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "fleet": fleet,
        "components": COMPONENTS,
        "page": page,
        "summary": [(key, name, fleet.counts[key]) for key, name in COMPONENTS.items()],
        "rows": [
            (t, [(c, t.versions[c], t.off(c), fleet.usual[c]) for c in COMPONENTS]) for t in page
        ],
        "only_drift": only_drift,
        "rack": rack,
        "query": query.urlencode(),
    }
    return render(request, "operator/versions.html", context)
