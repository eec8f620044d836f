"""Operators accept a tray waiting for acceptance (one that joined unknown, into a rack's
compute slot; one that reported a new identity, as it reported it), and pick the tray that
takes the place of one a placed domain lost."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from domains.audit.events import Actor
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.failover import domain_tray_replace
from domains.computedomains.models import ComputeDomain
from domains.errors import DomainError
from domains.inventory.models import Node, Rack
from domains.inventory.services import node_accept
from portal.web.access import SignedInRequest, operator_required


class AcceptForm(forms.Form):
    rack = forms.CharField(max_length=63, required=False)
    slot = forms.IntegerField(min_value=1, max_value=64, required=False)
    reason = forms.CharField(max_length=300, required=False)


def accept_racks() -> list[str]:
    """The rack names the accept form offers."""
    return list(Rack.objects.values_list("name", flat=True))


@operator_required
@require_POST
def accept(request: SignedInRequest, hostname: str) -> HttpResponse:
    tray = get_object_or_404(Node, hostname=hostname)
    form = AcceptForm(request.POST)
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        messages.error(request, f"{field}: {errors[0]}")
        return redirect("operator:node", tray.hostname)
    try:
        node_accept(actor=Actor.for_user(request.user), node=tray, **form.cleaned_data)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        tray.refresh_from_db()
        where = f"rack {tray.rack}, slot {tray.slot}" if tray.rack else "no rack"
        messages.success(request, f"{tray.hostname} accepted ({where}).")
    return redirect("operator:node", tray.hostname)


class ReplaceForm(forms.Form):
    tray = forms.CharField(max_length=253)
    replacement = forms.CharField(max_length=253, label="with")


@operator_required
@require_POST
def replace(request: SignedInRequest, uid: str) -> HttpResponse:
    """An operator picks the free tray that takes the place of one of a placed domain's."""
    domain = get_object_or_404(ComputeDomain.objects.select_related("namespace"), uid=uid)
    form = ReplaceForm(request.POST)
    back = redirect("tenant:domain", domain.namespace.name, domain.uid)
    if not form.is_valid():
        messages.error(request, "Pick the tray to replace and the free tray to take its place.")
        return back
    try:
        done = domain_tray_replace(
            actor=Actor.for_user(request.user),
            domain=domain,
            tray=form.cleaned_data["tray"],
            with_=form.cleaned_data["replacement"],
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return back
    messages.success(request, f"{done.old} replaced by {done.new}; it forms in now.")
    return back


def replacement_choices(domain: ComputeDomain) -> list[str]:
    """The free trays of the cliques a placed domain's trays are in (the operator's pick)."""
    cliques = set(domain.members.filter(active=True).values_list("clique_id", flat=True))
    return [
        t.hostname
        for c in topology_snapshot().cliques
        if c.clique_id in cliques
        for t in c.trays
        if t.free and t.gpu_count >= domain.gpus_per_node
    ]
