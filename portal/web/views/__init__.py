"""Pages per audience: `operator`, `tenant`, `admin`. This module holds what all share."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import cache_control

from domains.tenancy.selectors import is_operator, namespaces_visible_to


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send each audience to its starting page; list namespaces when there are several."""
    if is_operator(request.user):
        return redirect("operator:fabric")
    namespaces = list(namespaces_visible_to(request.user))
    if len(namespaces) == 1:
        return redirect("tenant:dashboard", namespaces[0].name)
    return render(request, "home.html", {"namespaces": namespaces})


@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers and tools that ask for /favicon.ico by habit get the page icon, not a 404."""
    return redirect(static("favicon.svg"), permanent=True)
