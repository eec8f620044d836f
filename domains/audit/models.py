"""The audit log: one `Event` per state change, written in the transaction of the change."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ActorKind(models.TextChoices):
    USER = "user", "User"
    AGENT = "agent", "Node agent"
    CONTROLLER = "controller", "Controller"
    KUBERNETES = "kubernetes", "Kubernetes"
    SYSTEM = "system", "System"


class Event(models.Model):
    """One line of the audit log and of a domain's timeline.

    The foreign keys name their models by app label, so this app imports none of the apps
    whose changes it records. The table keeps the name it had when the model lived in
    `computedomains` (moved without copying a row).
    """

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_name = models.CharField(max_length=150)
    verb = models.CharField(max_length=64, help_text="e.g. domain.requested, node.cordoned")
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    namespace = models.ForeignKey(
        "tenancy.Namespace",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="events",
    )
    domain = models.ForeignKey(
        "computedomains.ComputeDomain",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="events",
    )
    node = models.ForeignKey(
        "inventory.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    request_id = models.CharField(max_length=64, blank=True)
    message = models.CharField(max_length=500, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "computedomains_event"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["namespace", "created_at"], name="event_namespace_time"),
            models.Index(fields=["domain", "created_at"], name="event_domain_time"),
            models.Index(fields=["node", "created_at"], name="event_node_time"),
            models.Index(fields=["verb", "created_at"], name="event_verb_time"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.verb} {self.object_repr}"
        )
