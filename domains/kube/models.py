"""Kubernetes bookkeeping: which cluster object stands for which domain, and what was written.

The database stays the source of truth; these rows only remember enough to publish
idempotently (the hash of what was last written), to recognise adopted objects by their
uid, and to tell a kubectl user why their ComputeDomain was refused.
"""

from __future__ import annotations

from django.db import models

from domains.computedomains.models import ComputeDomain


class PublishedDomain(models.Model):
    """The `resource.nvidia.com/v1beta1` ComputeDomain object of one portal domain."""

    domain = models.OneToOneField(
        ComputeDomain, on_delete=models.CASCADE, related_name="kube_object"
    )
    adopted = models.BooleanField(
        default=False, help_text="Created with kubectl: the spec is the user's, the status ours."
    )
    object_uid = models.CharField(max_length=64, blank=True, help_text="metadata.uid there.")
    published_hash = models.CharField(max_length=64, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    removed = models.BooleanField(default=False, help_text="Deleted from the cluster on release.")
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["object_uid"], name="kube_published_object_uid")]

    def __str__(self) -> str:
        return f"ComputeDomain {self.domain}"


class RefusedComputeDomain(models.Model):
    """A kubectl-created ComputeDomain the portal did not adopt (quota, bad spec, …).

    The refusal is written back to the object (status NotReady, reason and message in
    annotations); the row lets the next resync try again once quota frees up.
    """

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    object_uid = models.CharField(max_length=64, unique=True)
    reason = models.CharField(max_length=64)
    message = models.TextField()
    reported = models.BooleanField(default=False, help_text="Written back to the object.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}: {self.reason}"


class SyncState(models.Model):
    """Where each watch stands, for the operator's eye (`kube_sync` writes it)."""

    resource = models.CharField(max_length=32, unique=True)
    resource_version = models.CharField(max_length=64, blank=True)
    listed_at = models.DateTimeField(null=True, blank=True)
    items = models.PositiveIntegerField(default=0, help_text="Objects in the last list.")
    errors = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.resource}@{self.resource_version}"


class TrayPod(models.Model):
    """A pod Kubernetes runs on a tray, with the ResourceClaims it uses: the kube sync's pod
    watch keeps one row per pod bound to a known tray and not finished."""

    uid = models.CharField(max_length=64, unique=True)
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="pods")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    phase = models.CharField(max_length=16, blank=True)
    claims = models.JSONField(default=list, blank=True)  # ResourceClaim names, its namespace's
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["namespace", "name"]
        indexes = [models.Index(fields=["node", "namespace"], name="traypod_node_namespace")]

    def __str__(self) -> str:
        return f"pod {self.namespace}/{self.name} on {self.node_id}"
