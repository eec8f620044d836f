"""Tenant pages: a namespace's dashboard, the request form with its live preview, and a
domain's detail with the formation timeline, peer matrix, manifests and actions."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from domains.audit.events import Actor
from domains.computedomains import services
from domains.computedomains.fabric import placement_targets
from domains.computedomains.models import LIVE_PHASES, ComputeDomain, Phase
from domains.computedomains.selectors import (
    domain_channels,
    domain_peers,
    domains_visible_to,
    quota_usage,
)
from domains.errors import DomainError, InvalidInput, InvalidTransition
from domains.foresight.maintenance import windows_for_domain
from domains.kube.manifests import workload_manifests
from domains.tenancy.models import Quota
from domains.tenancy.selectors import can_request_in
from portal.web.access import (
    SignedInRequest,
    requestable_namespace,
    visible_domain,
    visible_namespace,
)
from portal.web.fabric import fabric_view
from portal.web.forms import DomainRequestForm, ExtendLeaseForm, ReasonForm, apply_error

MANIFEST_KINDS = ("deployment", "job", "mpijob")
QUOTA_LABELS = {"gpus": "GPUs", "nodes": "Trays", "domains": "Domains"}
TIMELINE = (
    ("assigned", "Assigned"),
    ("configuring", "Configuring"),
    ("waiting_peers", "Waiting for peers"),
    ("ready", "Ready"),
)


@login_required
def dashboard(request: SignedInRequest, ns: str) -> HttpResponse:
    namespace = visible_namespace(request, ns)
    quota = Quota.objects.filter(namespace=namespace).first()
    usage = quota_usage(namespace)
    bars = [
        ("GPUs", usage["gpus"], quota.max_gpus if quota else None),
        ("Trays", usage["nodes"], quota.max_nodes if quota else None),
        ("Domains", usage["domains"], quota.max_domains if quota else None),
    ]
    qs = (
        domains_visible_to(request.user)
        .filter(namespace=namespace)
        .select_related("placement_estimate")
    )
    context = {
        "namespace": namespace,
        "bars": bars,
        "live": qs.filter(phase__in=LIVE_PHASES),
        "ended": qs.exclude(phase__in=LIVE_PHASES)[:20],
        "can_request": can_request_in(request.user, namespace),
    }
    template = "tenant/_dashboard.html" if request.GET.get("partial") else "tenant/dashboard.html"
    return render(request, template, context)


@login_required
@require_http_methods(["GET", "POST"])
def request_domain(request: SignedInRequest, ns: str) -> HttpResponse:
    namespace = requestable_namespace(request, ns)
    form = DomainRequestForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            domain = services.domain_request(
                actor=Actor.for_user(request.user), namespace=namespace, spec=form.to_spec()
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, f"Requested {domain.name}: {domain.message}.")
            return redirect("tenant:domain", namespace.name, domain.uid)
    return render(
        request,
        "tenant/request.html",
        {"namespace": namespace, "form": form, "targets": placement_targets()},
    )


@login_required
@require_POST
def preview(request: SignedInRequest, ns: str) -> HttpResponse:
    """The dry run for the form as typed so far: where it lands, or why not (htmx partial)."""
    namespace = requestable_namespace(request, ns)
    form = DomainRequestForm(request.POST)
    result, racks, problem = None, [], ""
    if form.is_valid():
        try:
            result = services.domain_dry_run(namespace=namespace, spec=form.to_spec())
        except InvalidInput as exc:
            apply_error(form, exc)
    if result is not None and result.placeable and result.rack:
        racks = fabric_view(
            viewer=request.user, rack_names=[result.rack], highlight=result.node_ids, links=False
        )
    if not form.is_valid():
        problem = "; ".join(
            f"{form.fields[f].label if f in form.fields else 'form'}: {' '.join(map(str, e))}"
            for f, e in form.errors.items()
        )
    rows = result.quota_impact if result else {}
    impact = [(QUOTA_LABELS.get(key, key), row) for key, row in rows.items()]
    return render(
        request,
        "tenant/_preview.html",
        {
            "result": result,
            "impact": impact,
            "racks": racks,
            "problem": problem,
            "namespace": namespace,
        },
    )


@login_required
def domain_detail(request: SignedInRequest, ns: str, uid: str) -> HttpResponse:
    namespace = visible_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    members = domain_peers(domain)
    manifests, manifests_note = {}, ""
    try:
        manifests = workload_manifests(domain)
    except InvalidTransition as exc:
        manifests_note = exc.message
    context = {
        "namespace": namespace,
        "domain": domain,
        "members": members,
        "timeline": [_timeline(m) for m in members],
        "matrix": _matrix(members),
        "channels": _channel_text(domain),
        "events": domain.events.all()[:50],
        "manifests": [(k, manifests[k]) for k in MANIFEST_KINDS if k in manifests],
        "manifests_note": manifests_note,
        "can_change": can_request_in(request.user, namespace) and domain.is_live,
        "can_extend": domain.phase in (Phase.READY, Phase.DEGRADED),
        "maintenance": list(windows_for_domain(domain)) if domain.is_live else [],
        "extend_form": ExtendLeaseForm(),
    }
    partial = request.GET.get("partial")
    template = {"1": "tenant/_domain.html", "manifests": "tenant/_manifests.html"}.get(
        partial or "", "tenant/domain.html"
    )
    return render(request, template, context)


@login_required
def manifest_download(request: SignedInRequest, ns: str, uid: str, kind: str) -> HttpResponse:
    namespace = visible_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    if kind not in MANIFEST_KINDS:
        raise Http404("no such manifest")
    try:
        text = workload_manifests(domain)[kind]
    except InvalidTransition as exc:
        raise Http404(exc.message) from exc
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{domain.name}-{kind}.yaml"'
    return response


@login_required
@require_http_methods(["GET", "POST"])
def release(request: SignedInRequest, ns: str, uid: str) -> HttpResponse:
    """GET asks for confirmation; POST releases (idempotent in the service)."""
    namespace = requestable_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.domain_release(
                actor=Actor.for_user(request.user),
                domain=domain,
                reason=form.cleaned_data["reason"],
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Releasing {domain.name}.")
            return redirect("tenant:domain", namespace.name, domain.uid)
    return render(
        request, "tenant/release.html", {"namespace": namespace, "domain": domain, "form": form}
    )


@login_required
@require_POST
def extend(request: SignedInRequest, ns: str, uid: str) -> HttpResponse:
    namespace = requestable_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    form = ExtendLeaseForm(request.POST)
    if form.is_valid():
        try:
            services.domain_extend_lease(
                actor=Actor.for_user(request.user),
                domain=domain,
                by=timedelta(hours=form.cleaned_data["hours"]),
            )
        except DomainError as exc:
            messages.error(request, f"Could not extend the lease: {exc.message}")
        else:
            messages.success(request, f"Extended the lease of {domain.name}.")
    else:
        messages.error(request, "Pick how long to extend the lease by.")
    return redirect("tenant:domain", namespace.name, domain.uid)


def _timeline(member) -> dict:
    """One tray's formation steps with the time each was reached (None: not yet)."""
    stamps = {
        "assigned": member.assigned_at,
        "configuring": member.configuring_at,
        "waiting_peers": member.waiting_peers_at,
        "ready": member.ready_at,
    }
    return {"member": member, "steps": [(label, stamps[s]) for s, label in TIMELINE]}


PEER_WORDS = {
    "CONNECTED": "C",
    "NEVER_CONNECTED": "N",
    "RECOVERING": "R",
    "DISCONNECTED": "D",
    "INVALID": "I",
    "VERSION_MISMATCH": "!V!",
    "NODE_MAP_MISMATCH": "!M!",
}


def _matrix(members) -> list[dict]:
    """Rows: each member; cells: how it sees every peer (its own cell is "self")."""
    rows = []
    for m in members:
        cells = []
        for peer in members:
            if peer.index == m.index:
                cells.append(("self", "-"))
                continue
            status = (m.connections or {}).get(str(peer.index)) or ""
            cells.append((status or "unknown", PEER_WORDS.get(status, "·")))
        rows.append({"member": m, "cells": cells})
    return rows


def _channel_text(domain: ComputeDomain) -> str:
    channels = domain_channels(domain) if domain.is_live else []
    if not channels:
        return ""
    if len(channels) > 8:
        return f"{channels[0]} to {channels[-1]} ({len(channels)} channels)"
    return ", ".join(str(c) for c in channels)
