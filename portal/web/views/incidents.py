"""Operator pages for incidents: every tray-down episode, and one page per incident with
the domains and tenants it hit, its timeline, and a note to those tenants."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import F
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from domains.audit.events import Actor
from domains.computedomains.incidents import (
    NOTE_MAX,
    incident_note,
    incident_notes,
    incident_timeline,
    incidents_visible_to,
)
from domains.errors import DomainError
from portal.web.access import SignedInRequest, operator_required
from portal.web.forms import apply_error

INCIDENTS_PER_PAGE = 50
NOTE_HELP = (
    "The tenants of every domain listed above read this note, word for word: on their "
    "domain's page, in its events and in their notifications. Say what happened and what "
    "they should do; leave out anything about other tenants."
)


class IncidentNoteForm(forms.Form):
    note = forms.CharField(
        label="Note to the affected tenants",
        max_length=NOTE_MAX,
        help_text=NOTE_HELP,
        widget=forms.Textarea(attrs={"rows": 4}),
    )


@operator_required
def incidents(request: SignedInRequest) -> HttpResponse:
    """Every incident, open ones first, newest first; `?state=open` for the open ones."""
    qs = incidents_visible_to(request.user).prefetch_related("domains__namespace")
    only_open = request.GET.get("state") == "open"
    if only_open:
        qs = qs.filter(ended_at=None)
    qs = qs.order_by(F("ended_at").desc(nulls_first=True), "-started_at", "-id")
    page = Paginator(qs, INCIDENTS_PER_PAGE).get_page(request.GET.get("page"))
    context = {"page": page, "incidents": page.object_list, "only_open": only_open}
    return render(request, "operator/incidents.html", context)


@operator_required
@require_http_methods(["GET", "POST"])
def incident(request: SignedInRequest, pk: int) -> HttpResponse:
    """One incident: the tray, the domains and tenants it hit, what happened since, the
    notes sent, and the form for another note (POST)."""
    found = get_object_or_404(incidents_visible_to(request.user), pk=pk)
    form = IncidentNoteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            reached = incident_note(
                actor=Actor.for_user(request.user), incident=found, note=form.cleaned_data["note"]
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(
                request, f"Note sent to the tenants of {reached} domain{'s' * (reached != 1)}."
            )
            return redirect("operator:incident", found.pk)
    hit = list(found.domains.select_related("namespace").order_by("namespace__name", "name"))
    tenants = sorted({d.namespace.name for d in hit})
    context = {
        "incident": found,
        "node": found.node,
        "domains": hit,
        "tenants": tenants,
        "timeline": list(incident_timeline(found)),
        "notes": list(incident_notes(found)),
        "form": form,
    }
    return render(request, "operator/incident.html", context)
