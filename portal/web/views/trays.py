"""Operators accept a tray waiting for acceptance: one that joined unknown, into a rack's
compute slot; one that reported a new identity, as it reported it."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from domains.audit.events import Actor
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
