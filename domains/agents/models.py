"""Agent enrolment: join tokens that let a tray's agent register and get its node token."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class JoinToken(models.Model):
    """A secret an operator hands to node agents; stored hashed."""

    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=128, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_uses__isnull=True) | Q(uses__lte=models.F("max_uses")),
                name="join_token_uses_within_max",
            ),
        ]

    def __str__(self) -> str:
        return self.name
