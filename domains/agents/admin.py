from __future__ import annotations

from django.contrib import admin

from domains.agents.models import JoinToken


@admin.register(JoinToken)
class JoinTokenAdmin(admin.ModelAdmin[JoinToken]):
    list_display = ["name", "created_at", "expires_at", "uses", "max_uses", "revoked_at"]
    exclude = ["token_hash"]
