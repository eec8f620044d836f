"""Operator pages: the fabric overview, racks, trays, all domains, the channel ledger, and
what losing a part would hit (its blast radius)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from domains.audit.events import Actor
from domains.computedomains.fabric import (
    fabric_read,
    power_shelves_visible_to,
    switch_trays_visible_to,
    unracked_trays,
)
from domains.computedomains.models import (
    LIVE_PHASES,
)
from domains.computedomains.selectors import (
    channel_ledger,
    desired_member,
    domains_visible_to,
    events_visible_to,
)
from domains.computedomains.trays import (
    TRAY_ACTIONS,
    tray_act,
    tray_action_refusal,
    tray_actions_for,
    trays_act,
)
from domains.computedomains.traytruth import node_truth
from domains.computedomains.trends import RANGES, fleet_trends
from domains.errors import DomainError
from domains.foresight.blast import (
    blast_radius,
    clique_by_label,
    clique_scope,
    rack_scope,
    scope_named,
    tray_scope,
    trays_scope,
)
from domains.foresight.maintenance import (
    maintenance_cancel,
    maintenance_schedule,
    window_for,
    window_views,
    windows_visible_to,
)
from domains.inventory import services as inventory
from domains.inventory.gpuhealth import gpu_readings
from domains.inventory.models import Node, NodeState, PowerShelf, Rack, SwitchTray
from domains.kube.client import kube_enabled
from domains.kube.workloads import tray_pods
from portal.web.access import SignedInRequest, operator_required
from portal.web.calendar import parse_day
from portal.web.fabric import Visibility, draw_racks, fabric_view
from portal.web.fleet import Filters, dress_racks, fleet, heatmap_context
from portal.web.forms import (
    DomainFilterForm,
    FleetFilterForm,
    LedgerFilterForm,
    MaintenanceForm,
    PartStateForm,
    ReasonForm,
    apply_error,
)
from portal.web.sparkline import span_words
from portal.web.views.health import health_context
from portal.web.views.tenant import with_queue_positions
from portal.web.views.trays import accept_racks

MARK_DOWN_NOTE = "Tenants whose domain uses this tray read this reason, word for word."
TENANT_READS = ("mark_down", "cordon", "drain")  # actions whose reason tenants are told
RACKS_PER_PAGE = 12
BULK_LIMIT = 1000  # trays one bulk action may name
SEARCH_RESULTS = 50


@operator_required
def fabric(request: SignedInRequest) -> HttpResponse:
    """The fleet: filters in one toolbar, a summary, the last day's trends, every rack as a
    heat-map tile and a page of full rack elevations; `?partial=1` for live refresh. The
    same queries for 2 racks or 1,000."""
    form = FleetFilterForm(request.GET or None)
    filters = form.filters() if form.is_valid() else Filters()
    the_fleet = fleet(filters)
    form.offer(the_fleet.namespaces, the_fleet.outline)
    if filters.q and len(the_fleet.matches) == 1 and not request.GET.get("partial"):
        return redirect("operator:node", the_fleet.matches[0].hostname)
    shown = the_fleet.shown
    page = Paginator(shown, RACKS_PER_PAGE).get_page(request.GET.get("page"))
    names = [t.name for t in page.object_list]
    read = (
        fabric_read(rack_names=names, topology=the_fleet.topology, summaries=the_fleet.summaries)
        if names
        else None
    )
    racks = draw_racks(read, Visibility.of(request.user)) if read else []
    now = timezone.now()
    dress_racks(racks, now=now, matches=the_fleet.matching_ids, outline=the_fleet.outlined)
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("partial", None)
    context = {
        "form": form,
        "filters": filters,
        "fleet": the_fleet,
        "band": the_fleet.band,
        # Every rack as a tile when the elevations take more than one page, a filter picks
        # racks out or a domain is outlined; otherwise the elevations show every rack.
        "show_heatmap": bool(filters.active or the_fleet.outline)
        or len(the_fleet.tiles) > RACKS_PER_PAGE,
        **heatmap_context(the_fleet, filters),
        "racks": racks,
        "page": page,
        "query": query.urlencode(),
        "matches": the_fleet.matches[:SEARCH_RESULTS] if filters.active else [],
        "bulk_ok": filters.active and 0 < len(the_fleet.matches) <= BULK_LIMIT,
        "unracked": unracked_trays(),
        **_trend_context(request, now),
        "now": now,
    }
    if request.GET.get("partial"):
        return render(request, "operator/_fabric.html", context)
    return render(request, "operator/fabric.html", context | health_context())


def _trend_context(request: SignedInRequest, now: datetime) -> dict[str, object]:
    """The trends over the range asked for (`?range=6h|24h|7d`; default 24 h)."""
    chosen = request.GET.get("range", "")
    chosen = chosen if chosen in RANGES else next(iter(RANGES))
    query = request.GET.copy()
    for key in ("range", "page", "partial"):
        query.pop(key, None)
    return {
        "trends": fleet_trends(now=now, window=RANGES[chosen]),
        "trends_range": chosen,
        "trends_range_words": span_words(RANGES[chosen]),
        "trend_ranges": [(key, span_words(span)) for key, span in RANGES.items()],
        "query_without_range": query.urlencode(),
    }


@operator_required
def rack(request: SignedInRequest, name: str) -> HttpResponse:
    views = fabric_view(viewer=request.user, rack_names=[name])
    if not views:
        raise Http404("no such rack")
    template = "operator/_rack.html" if request.GET.get("partial") else "operator/rack.html"
    trays = [views[0].trays[s] for s in sorted(views[0].trays)]
    the_rack = get_object_or_404(Rack, name=name)
    dress_racks(views, now=timezone.now())
    context = {
        "rack": views[0],
        "trays": trays,
        "blast": blast_radius(rack_scope(the_rack)),
        "switch_trays": switch_trays_visible_to(request.user).filter(rack=the_rack),
        "power_shelves": power_shelves_visible_to(request.user).filter(rack=the_rack),
    }
    return render(request, template, context)


@operator_required
def clique(request: SignedInRequest, label: str) -> HttpResponse:
    """One NVLink clique: its trays on their rack, occupancy and fragmentation, the domains
    on it (what losing or draining it would hit) and bulk actions on its trays."""
    the_clique = clique_by_label(label)
    if the_clique is None:
        raise Http404("no such clique")
    scope = clique_scope(the_clique)
    rack = the_clique.rack.name if the_clique.rack else None
    views = fabric_view(viewer=request.user, rack_names=[rack]) if rack else []
    trays = [t for v in views for _, t in sorted(v.trays.items()) if t.clique_id == the_clique.pk]
    summary = next((c for v in views for c in v.cliques if c.clique_id == the_clique.pk), None)
    dress_racks(views, now=timezone.now(), matches=frozenset(t.node_id for t in trays))
    context = {
        "clique": the_clique,
        "racks": views,
        "trays": trays,
        "summary": summary,
        "blast": blast_radius(scope),
    }
    template = "operator/_clique.html" if request.GET.get("partial") else "operator/clique.html"
    return render(request, template, context)


@operator_required
def node(request: SignedInRequest, hostname: str) -> HttpResponse:
    tray = get_object_or_404(Node.objects.select_related("rack", "clique"), hostname=hostname)
    context = {
        "node": tray,
        "truth": node_truth(tray),
        "gpus": gpu_readings(tray.gpus.all(), now=timezone.now()),
        "kube": kube_enabled(),
        "pods": tray_pods(request.user, [tray.pk]) if kube_enabled() else [],
        "conditions": list(tray.conditions.all()),
        "member": desired_member(tray),
        "report": tray.agent_report or {},
        "events": events_visible_to(request.user).filter(node=tray)[:50],
        "actions": tray_actions_for(tray),
        "blast": blast_radius(tray_scope(tray)),
        "accept_racks": accept_racks() if tray.state == NodeState.PENDING else [],
    }
    if request.GET.get("partial"):
        return render(request, "operator/_node.html", context)
    return render(request, "operator/node.html", context | health_context(tray))


@operator_required
@require_http_methods(["GET", "POST"])
def node_action(request: SignedInRequest, hostname: str, action: str) -> HttpResponse:
    """GET asks for confirmation (and a reason) and says up front when the action would be
    refused; POST calls the service."""
    if action not in TRAY_ACTIONS:
        raise Http404("no such action")
    chosen = TRAY_ACTIONS[action]
    tray = get_object_or_404(Node, hostname=hostname)
    form = ReasonForm(request.POST or None)
    if action in TENANT_READS:  # the tenant's page and notifications carry this reason
        form.fields["reason"].help_text = MARK_DOWN_NOTE
    if request.method == "POST" and form.is_valid():
        try:
            tray_act(
                actor=Actor.for_user(request.user),
                node=tray,
                action=action,
                reason=form.cleaned_data["reason"],
            )
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"{tray.hostname}: {chosen.title.lower()} done.")
        return redirect("operator:node", tray.hostname)
    context = {
        "node": tray,
        "form": form,
        "action": chosen,
        "refusal": tray_action_refusal(tray, chosen),
        # Drain and cordon previews: who is on the tray and must end before any service.
        "blast": blast_radius(tray_scope(tray)),
    }
    return render(request, "operator/node_action.html", context)


def _next(request: SignedInRequest, data) -> str:
    """Where to go back to after a bulk action: a page of this site, else the fabric."""
    target = data.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return reverse("operator:fabric")


@operator_required
@require_http_methods(["GET", "POST"])
def bulk_action(request: SignedInRequest) -> HttpResponse:
    """Cordon, drain or uncordon many trays: a first GET or POST previews which trays it
    changes and which domains and tenants it touches (the trays' blast radius); a POST
    with `confirm=1` does it. (POST for the preview too: a thousand hostnames do not fit
    in a URL.)"""
    data = request.POST if request.method == "POST" else request.GET
    action = data.get("action", "")
    if action not in TRAY_ACTIONS or not TRAY_ACTIONS[action].bulk:
        messages.error(request, "Pick cordon, drain or uncordon for the selected trays.")
        return redirect(_next(request, data))
    chosen = TRAY_ACTIONS[action]
    names = [h for h in data.getlist("tray") if h][:BULK_LIMIT]
    confirmed = request.method == "POST" and data.get("confirm") == "1"
    trays = list(Node.objects.filter(hostname__in=names).order_by("rack__position", "slot"))
    if not trays:
        messages.error(request, "Select at least one tray first.")
        return redirect(_next(request, data))
    form = ReasonForm(request.POST if confirmed else None)
    if action in TENANT_READS:
        form.fields["reason"].help_text = MARK_DOWN_NOTE
    if confirmed and form.is_valid():
        outcomes = trays_act(
            actor=Actor.for_user(request.user),
            nodes=trays,
            action=action,
            reason=form.cleaned_data["reason"],
        )
        done = [o.hostname for o in outcomes if o.done]
        refused = [o for o in outcomes if not o.done]
        if done:
            messages.success(request, f"{chosen.title} done on {len(done)} tray(s).")
        for o in refused[:20]:
            messages.error(request, o.message)
        return redirect(_next(request, data))
    rows = [(t, tray_action_refusal(t, chosen)) for t in trays]
    context = {
        "action": chosen,
        "rows": rows,
        "changes": sum(1 for _, refusal in rows if not refusal),
        "form": form,
        "next": data.get("next", ""),
        "blast": blast_radius(trays_scope(trays)),
    }
    return render(request, "operator/bulk_action.html", context)


@operator_required
def domains(request: SignedInRequest) -> HttpResponse:
    """Every domain across namespaces, filtered by name, namespace and phase."""
    form = DomainFilterForm(request.GET or None)
    qs = (
        domains_visible_to(request.user)
        .select_related("placement_estimate")
        .annotate(trays=Count("members", filter=Q(members__active=True)))
    )
    if form.is_valid():
        data = form.cleaned_data
        if data["q"]:
            qs = qs.filter(name__icontains=data["q"])
        if data["namespace"]:
            qs = qs.filter(namespace__name=data["namespace"])
        if data["phase"] == "live":
            qs = qs.filter(phase__in=LIVE_PHASES)
        elif data["phase"]:
            qs = qs.filter(phase=data["phase"])
    template = "operator/_domains.html" if request.GET.get("partial") else "operator/domains.html"
    filtered = any(request.GET.get(f) for f in DomainFilterForm.base_fields)
    context = {"form": form, "domains": with_queue_positions(qs[:500]), "filtered": filtered}
    return render(request, template, context)


@operator_required
def channels(request: SignedInRequest) -> HttpResponse:
    """The IMEX channel ledger per clique: who holds which channel number now, a page of
    cliques at a time, filtered by tenant or searched by rack or clique."""
    form = LedgerFilterForm(request.GET)
    data = form.cleaned_data if form.is_valid() else {"namespace": "", "q": ""}
    ledger = channel_ledger(
        namespace=data["namespace"], search=data["q"], page=request.GET.get("page")
    )
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "ledger": ledger,
        "cliques": ledger.cliques,
        "page": ledger.page,
        "query": query.urlencode(),
        "filtered": bool(data["namespace"] or data["q"]),
    }
    return render(request, "operator/channels.html", context)


SCOPE_WORDS = {
    "tray": "Tray",
    "rack": "Rack",
    "clique": "Clique",
    "switch_tray": "NVLink switch tray",
    "power_shelf": "Power shelf",
}
PART_SERVICES: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "switch_tray": (SwitchTray, "tray", inventory.switch_tray_set_state),
    "power_shelf": (PowerShelf, "shelf", inventory.power_shelf_set_state),
}


@operator_required
@require_http_methods(["GET", "POST"])
def impact(request: SignedInRequest, kind: str, name: str) -> HttpResponse:
    """What losing a clique, a rack, a tray, a switch tray or a power shelf would hit; for
    switch trays and power shelves also their state, which operators set here."""
    try:
        scope = scope_named(kind, name)
    except DomainError as exc:
        raise Http404(exc.message) from exc
    part, form = None, None
    if kind in PART_SERVICES:
        model, argument, service = PART_SERVICES[kind]
        part = get_object_or_404(model, name=name)
        form = PartStateForm(request.POST or None, initial={"state": part.state})
        if request.method == "POST" and form.is_valid():
            try:
                service(actor=Actor.for_user(request.user), **{argument: part}, **form.cleaned_data)
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"{name}: now {form.cleaned_data['state']}.")
                return redirect("operator:impact", kind, name)
    elif request.method == "POST":
        raise Http404("nothing to change here")
    context = {
        "scope": scope,
        "what": SCOPE_WORDS[kind],
        "blast": blast_radius(scope),
        "part": part,
        "form": form,
    }
    return render(request, "operator/impact.html", context)


@operator_required
@require_http_methods(["GET", "POST"])
def maintenance(request: SignedInRequest) -> HttpResponse:
    """Windows ahead with the domains already there, and a form to schedule one."""
    form = MaintenanceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            window = maintenance_schedule(
                actor=Actor.for_user(request.user),
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                reason=data["reason"],
                **form.scope_arguments(),
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, f"Scheduled {window}.")
            # The calendar link then opens on the new window's week, not today's.
            return redirect(f"{reverse('operator:maintenance')}?on={window.starts_at:%Y-%m-%d}")
    views = window_views(request.user, windows_visible_to(request.user))
    context = {"form": form, "windows": views, "on": parse_day(request.GET.get("on", ""))}
    return render(request, "operator/maintenance.html", context)


@operator_required
@require_POST
def maintenance_cancel_view(request: SignedInRequest, pk: int) -> HttpResponse:
    try:
        window = maintenance_cancel(
            actor=Actor.for_user(request.user), window=window_for(request.user, pk)
        )
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Called off {window}.")
    return redirect("operator:maintenance")
