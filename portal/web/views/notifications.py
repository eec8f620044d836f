"""A person's notifications: the in-app inbox, their subscriptions (in-app, e-mail,
signed webhooks) and each subscription's delivery log. Everyone sees only their own."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from domains.errors import DomainError
from domains.notifications.selectors import (
    deliveries_of,
    inbox_of,
    subscription_of,
    subscriptions_of,
)
from domains.notifications.services import (
    notifications_mark_read,
    subscription_create,
    subscription_delete,
)
from portal.ratelimit import SUBSCRIPTION_CREATES, over_rate
from portal.web.access import SignedInRequest
from portal.web.forms import SubscriptionForm, apply_error


@login_required
@require_http_methods(["GET", "POST"])
def notifications(request: SignedInRequest) -> HttpResponse:
    form = SubscriptionForm(request.POST or None, user=request.user)
    wait = over_rate(SUBSCRIPTION_CREATES, request.user.pk) if request.method == "POST" else 0
    if wait:
        form.add_error(None, f"Too many subscriptions made in a minute; try again in {wait} s.")
    elif request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            subscription_create(user=request.user, **data)
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, "Subscribed.")
            return redirect("notifications")
    context = {
        "inbox": inbox_of(request.user)[:50],
        "subscriptions": subscriptions_of(request.user),
        "form": form,
    }
    response = render(request, "notifications/index.html", context, status=429 if wait else 200)
    if wait:
        response["Retry-After"] = str(wait)
    return response


@login_required
def badge(request: SignedInRequest) -> HttpResponse:
    """The navbar link with its unread count (re-fetched live)."""
    return render(request, "partials/_nav_notifications.html")


@login_required
@require_POST
def mark_read(request: SignedInRequest) -> HttpResponse:
    count = notifications_mark_read(user=request.user)
    messages.success(request, f"Marked {count} read.")
    return redirect("notifications")


@login_required
def subscription(request: SignedInRequest, pk: int) -> HttpResponse:
    """One subscription with its delivery log (its webhook secret for its owner)."""
    try:
        found = subscription_of(request.user, pk)
    except DomainError as exc:
        raise Http404(exc.message) from exc
    context = {"subscription": found, "deliveries": deliveries_of(found)}
    return render(request, "notifications/subscription.html", context)


@login_required
@require_POST
def subscription_remove(request: SignedInRequest, pk: int) -> HttpResponse:
    try:
        found = subscription_of(request.user, pk)
    except DomainError as exc:
        raise Http404(exc.message) from exc
    subscription_delete(subscription=found)
    messages.success(request, "Unsubscribed.")
    return redirect("notifications")
