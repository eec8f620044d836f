"""Tenancy: a Kubernetes namespace is the tenant unit; members, quotas and API tokens."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from domains.validators import validate_dns1123_label


class NamespaceSource(models.TextChoices):
    PORTAL = "portal", "Portal"
    KUBERNETES = "kubernetes", "Kubernetes"


class Namespace(models.Model):
    """A tenant: mirrors one Kubernetes namespace."""

    name = models.CharField(max_length=63, unique=True, validators=[validate_dns1123_label])
    display_name = models.CharField(max_length=200, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    source = models.CharField(
        max_length=16, choices=NamespaceSource.choices, default=NamespaceSource.PORTAL
    )
    active = models.BooleanField(default=True, help_text="False once gone from Kubernetes.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
                name="namespace_name_dns1123",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Namespace admin"


class Membership(models.Model):
    """A user's role in one namespace."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["namespace__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "namespace"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.namespace} ({self.role})"


class Quota(models.Model):
    """Limits for one namespace. Empty means unlimited."""

    namespace = models.OneToOneField(Namespace, on_delete=models.CASCADE, related_name="quota")
    max_gpus = models.PositiveIntegerField(null=True, blank=True)
    max_nodes = models.PositiveIntegerField(null=True, blank=True)
    max_domains = models.PositiveIntegerField(null=True, blank=True)
    max_nodes_per_domain = models.PositiveIntegerField(null=True, blank=True)
    max_lifetime = models.DurationField(null=True, blank=True)
    approval_above_nodes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests for more trays than this wait for an admin."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(max_gpus__gte=0) | Q(max_gpus__isnull=True), name="quota_gpus_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(max_nodes__gte=0) | Q(max_nodes__isnull=True),
                name="quota_nodes_gte_0",
            ),
            models.CheckConstraint(
                condition=Q(max_domains__gte=0) | Q(max_domains__isnull=True),
                name="quota_domains_gte_0",
            ),
            models.CheckConstraint(
                condition=Q(max_nodes_per_domain__gte=0) | Q(max_nodes_per_domain__isnull=True),
                name="quota_nodes_per_domain_gte_0",
            ),
            models.CheckConstraint(
                condition=Q(max_lifetime__gte=timedelta(0)) | Q(max_lifetime__isnull=True),
                name="quota_lifetime_gte_0",
            ),
        ]

    def __str__(self) -> str:
        return f"quota for {self.namespace}"


class ApiToken(models.Model):
    """A personal API token: sent as `Authorization: Bearer <token>`, stored hashed."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, db_index=True, help_text="Shown to identify it.")
    token_hash = models.CharField(max_length=128, unique=True)
    read_only = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="children",
        help_text="The token that minted this one: it expires no later and is revoked with it.",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.user} / {self.name} ({self.prefix}…)"
