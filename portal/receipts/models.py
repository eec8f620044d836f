"""One row per committed write: written in the write's own transaction, so it exists if and
only if the write committed.

`portal.outage.DatabaseAwayMiddleware` runs every write (but the agents') in one transaction
and adds its receipt just before COMMIT. When the connection is lost during COMMIT the
middleware cannot know whether it happened; once PostgreSQL answers again the receipt says
so: there, the stored answer is sent; absent, the write is run again under the same key (a
twin still in flight holds the key's index entry, so the two cannot both commit). A client
that sends `Idempotency-Key` gets the same across its own retries: a key already answered
is answered again from its receipt (`Idempotent-Replayed: true`), never run twice.
"""

from __future__ import annotations

from django.db import models


class WriteReceipt(models.Model):
    # sha256 of the caller's credential and its Idempotency-Key, or a random key per request
    key = models.CharField(max_length=64, unique=True)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=2000)
    body_digest = models.CharField(max_length=64)  # sha256 of the request body
    status = models.PositiveSmallIntegerField()
    headers = models.JSONField(default=dict)  # Content-Type, Location
    body = models.BinaryField()  # kept only for a client's own key, and never a secret
    # The write was done under a client's key but its answer was not kept (no-store: it
    # held a secret shown once); a retry is told so instead of being answered the secret.
    withheld = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "portal_write_receipt"

    def __str__(self) -> str:
        return f"{self.method} {self.path} → {self.status}"
