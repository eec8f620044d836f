"""What foresight keeps: each queued domain's placement estimate."""

from __future__ import annotations

from django.db import models

from domains.computedomains.models import ComputeDomain


class EstimateReason(models.TextChoices):
    FITS_NOW = "FitsNow", "Fits now"
    ESTIMATED = "Estimated", "Estimated"
    NEVER_FITS = "NeverFits", "Can never fit the fabric as it is"
    NO_LEASE_ENDS = "NoLeaseEnds", "Waits on trays held without a lease end"


class PlacementEstimate(models.Model):
    """When a domain waiting for capacity (or approval) would be placed, as last forecast.

    Refreshed by `estimates_refresh` (beat, and whenever capacity comes free or a domain is
    queued); kept only while the domain waits. Pages and the API read it with the domain
    (one join), so lists cost no more queries for it.
    """

    domain = models.OneToOneField(
        ComputeDomain,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="placement_estimate",
    )
    estimated_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=16, choices=EstimateReason.choices)
    message = models.CharField(max_length=500, blank=True)
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"estimate for {self.domain_id}: {self.estimated_at or self.reason}"
