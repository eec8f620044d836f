"""Receipts are kept for a day: long enough for any client's retries (beat, hourly)."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from portal.receipts.models import WriteReceipt

KEEP = timedelta(hours=24)


@shared_task(name="portal.purge_receipts")
def purge_receipts() -> int:
    deleted, _ = WriteReceipt.objects.filter(created_at__lt=timezone.now() - KEEP).delete()
    return deleted
