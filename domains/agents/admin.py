"""Join tokens in the Django admin: listed read-only, minted and revoked through the
services (`domains/agents/jointokens.py`), so every token gets a hash, an expiry and an
audit event, and its secret is shown once. Portal admins (superusers) only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from domains.admin import ReadOnlyAdmin
from domains.agents.jointokens import (
    DEFAULT_EXPIRY,
    MAX_EXPIRY,
    join_token_create,
    join_token_limits,
    join_token_revoke,
    join_token_state,
)
from domains.agents.models import JoinToken
from domains.audit.events import Actor
from domains.errors import DomainError


class MintForm(forms.Form):
    name = forms.CharField(
        max_length=100, help_text="What it is for, e.g. the rack being installed."
    )
    expires_in = forms.IntegerField(
        label="Expires in (hours)",
        min_value=1,
        max_value=int(MAX_EXPIRY.total_seconds() // 3600),
        initial=int(DEFAULT_EXPIRY.total_seconds() // 3600),
    )
    max_uses = forms.IntegerField(
        required=False, min_value=1, help_text="Trays it may register; empty for no limit."
    )


@admin.register(JoinToken)
class JoinTokenAdmin(ReadOnlyAdmin[JoinToken]):
    list_display = ["name", "state", "limits", "created_by", "created_at", "revoked_at"]
    list_select_related = ["created_by"]
    search_fields = ["name"]
    exclude = ["token_hash"]
    actions = ["revoke"]

    @admin.display(description="state")
    def state(self, token: JoinToken) -> str:
        return join_token_state(token)

    @admin.display(description="expiry and uses")
    def limits(self, token: JoinToken) -> str:
        return join_token_limits(token)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    @admin.action(description="Revoke the selected join tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[JoinToken]) -> None:
        if not request.user.is_authenticated:
            return
        actor = Actor.for_user(request.user)
        for token in queryset:
            try:
                join_token_revoke(actor=actor, token=token)
            except DomainError as exc:
                messages.error(request, exc.message)
            else:
                messages.success(request, f"Join token {token.name!r} revoked.")

    def get_urls(self) -> list[URLPattern]:
        mint = path(
            "mint/",
            self.admin_site.admin_view(self.mint_view),
            name="agents_jointoken_mint",
        )
        return [mint, *super().get_urls()]

    def mint_view(self, request: HttpRequest) -> HttpResponse:
        """A form that calls `join_token_create` and shows the secret on its answer, once."""
        if not request.user.is_authenticated or not request.user.is_superuser:
            raise PermissionDenied
        form = MintForm(request.POST or None)
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Mint a join token",
            "form": form,
        }
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                token, raw = join_token_create(
                    actor=Actor.for_user(request.user),
                    name=data["name"],
                    expires_in=timedelta(hours=data["expires_in"]),
                    max_uses=data["max_uses"],
                )
            except DomainError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                context.update(token=token, raw=raw, limits=join_token_limits(token))
        return TemplateResponse(request, "admin/agents/jointoken/mint.html", context)
