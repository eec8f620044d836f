"""Signing in, and the signed-in user's own things: personal API tokens for scripts and
kubectl-style clients.

A token's secret is shown once and never again (only its hash is stored); the list shows
each token's prefix to tell them apart. The POST that creates one redirects (reloading the
page must not mint a second token): the secret waits in the session for that one GET,
which takes it out and answers `Cache-Control: no-store`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from domains.audit.events import Actor
from domains.errors import DomainError
from domains.tenancy.models import ApiToken
from domains.tenancy.seed import DEMO_PASSWORD, demo_logins
from domains.tenancy.tokens import token_create, token_revoke
from portal.ratelimit import TOKEN_MINTS, over_rate
from portal.signin import RateLimitedLoginView
from portal.web.access import SignedInRequest
from portal.web.forms import TokenCreateForm, apply_error

# The session key under which the secret of the token just created waits to be shown.
NEW_TOKEN = "new_api_token"  # noqa: S105 - a key, not a secret


class SignInView(RateLimitedLoginView):
    """The sign-in page. With DEBUG on it lists the demo's logins, the only time they work
    (portal/auth.py refuses them otherwise); with DEBUG off it never names them."""

    template_name = "auth/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        if settings.DEBUG:
            context["demo_logins"] = demo_logins()
            context["demo_password"] = DEMO_PASSWORD
        return context


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: SignedInRequest) -> HttpResponse:
    form = TokenCreateForm(request.POST or None)
    wait = over_rate(TOKEN_MINTS, request.user.pk) if request.method == "POST" else 0
    if wait:
        form.add_error(None, f"Too many tokens made in a minute; try again in {wait} s.")
    elif request.method == "POST" and form.is_valid():
        try:
            token, raw = token_create(
                actor=Actor.for_user(request.user),
                user=request.user,
                name=form.cleaned_data["name"],
                read_only=form.cleaned_data["read_only"],
                expires_in=form.expires_in(),
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            request.session[NEW_TOKEN] = {"id": token.pk, "raw": raw}
            return redirect("tokens")
    created = _created(request)
    context = {
        "form": form,
        "created": created,
        "tokens": ApiToken.objects.filter(user=request.user).order_by("-created_at"),
        "now": timezone.now(),
    }
    response = render(request, "account/tokens.html", context, status=429 if wait else 200)
    if wait:
        response["Retry-After"] = str(wait)
    if created:
        response["Cache-Control"] = "no-store"  # the secret must not sit in a cache
    return response


def _created(request: SignedInRequest) -> dict[str, object] | None:
    """The token just created and its secret, taken out of the session (shown once)."""
    new = request.session.pop(NEW_TOKEN, None) if request.method == "GET" else None
    if not new:
        return None
    token = ApiToken.objects.filter(pk=new["id"], user=request.user).first()
    return {"token": token, "raw": new["raw"]} if token is not None else None


@login_required
@require_POST
def token_revoke_view(request: SignedInRequest, token_id: int) -> HttpResponse:
    token = ApiToken.objects.filter(pk=token_id, user=request.user).first()
    if token is None:  # someone else's token looks exactly like a missing one
        raise Http404("No such token.")
    token_revoke(actor=Actor.for_user(request.user), token=token)
    messages.success(request, f"Revoked token {token.name} ({token.prefix}…).")
    return redirect("tokens")
