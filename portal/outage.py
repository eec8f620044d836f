"""PostgreSQL away: every request answers 503 with `Retry-After`, never 500
(docs/reliability.md).

A lost or refused database connection is not a bug in the request (Django still logs each
503 on `django.request`): the API answers in its own error shape (`{"code": "unavailable",
"message": …}`), pages with a small page of their own that needs no database (the site's
base template would look up the user and the navbar). Two places catch it:
`DatabaseAwayMiddleware.process_exception` for views (the API's exception handler answers the
same for DRF views), and the project's handler500 (`portal.api.errors.server_error`) for what
escapes middleware (a session saved after the view, for one).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import uuid
from typing import Any

from django import db
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse

from domains.errors import DATABASE_AWAY, database_away
from portal.receipts.models import WriteReceipt

log = logging.getLogger(__name__)

# Seconds a client is asked to wait: about what a PostgreSQL restart or failover takes.
RETRY_AFTER_S = 5

MESSAGE = "The database is unavailable for a moment; try again shortly."

# A request that lost the database is tried again for this long before it answers 503.
SAFE_RETRY_S = float(os.environ.get("PORTAL_DB_RETRY_S", 10))
SAFE_RETRY_PAUSE_S = 0.5
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# Writes not run in the middleware's transaction: the agents' reports (autocommit by design;
# an agent retries a failed report on its own).
UNGUARDED_PREFIXES = ("/api/v1/agent/",)
IDEMPOTENCY_HEADER = "Idempotency-Key"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
_KEPT_HEADERS = ("Content-Type", "Location")
_MARK = "database_away"

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Unavailable · Domain Portal</title></head>
<body style="font-family: sans-serif; margin: 3rem;">
<h1>Back in a moment</h1>
<p>{message} Nothing you submitted was lost or half-done.</p>
</body></html>
"""


def unavailable_body() -> dict[str, Any]:
    return {"code": "unavailable", "message": MESSAGE}


def unavailable(request: HttpRequest) -> HttpResponse:
    """The 503 for this request: the API's error shape under /api/, a page elsewhere."""
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse(unavailable_body(), status=503)
    else:
        response = HttpResponse(_PAGE.format(message=MESSAGE), status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    setattr(response, _MARK, True)
    return response


class DatabaseAwayMiddleware:
    """A view that lost the database answers 503, not 500, and only once waiting has failed.

    A PostgreSQL restart or failover takes a second or two, so a request in flight when it
    happens is run again on a fresh connection for up to `SAFE_RETRY_S` before it answers
    503:

    - a read (GET, HEAD, OPTIONS: nothing written, nothing half-done) simply again;
    - a write (any other method, but the agents' own API, whose agents retry by design) runs
      in one transaction with its receipt (`portal.receipts`) added just before COMMIT. Lost
      before COMMIT, nothing happened: it runs again. Lost during COMMIT, nobody can tell;
      once PostgreSQL answers, the receipt does: committed, the answer is sent; not, it
      runs again under the same key, which cannot commit twice. A client's own
      `Idempotency-Key` names the receipt, so its retries are answered from it.
    """

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in SAFE_METHODS:
            return self._read(request)
        if request.path.startswith(UNGUARDED_PREFIXES):
            return self.get_response(request)
        return self._write(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not database_away(exception):
            return None
        return unavailable(request)

    def _read(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse = self.get_response(request)
        deadline = time.monotonic() + SAFE_RETRY_S
        while getattr(response, _MARK, False) and time.monotonic() < deadline:
            _pause()
            response = self.get_response(request)
        return response

    def _write(self, request: HttpRequest) -> HttpResponse:
        try:
            digest = hashlib.sha256(request.body).hexdigest()  # read now: a rerun parses it again
        except RequestDataTooBig:
            return self.get_response(request)  # answered 413 by the view's parser
        client_key = request.headers.get(IDEMPOTENCY_HEADER, "")
        if client_key and not _KEY.fullmatch(client_key):
            return _bad_key(request, "must be 1-255 printable ASCII characters")
        key = _scoped(request, client_key) if client_key else uuid.uuid4().hex
        attempt = _Attempt(request, key, digest, replayable=bool(client_key))
        deadline = time.monotonic() + SAFE_RETRY_S
        check = bool(client_key)  # a client's retry may find its answer waiting
        while True:
            if check:
                known, found = attempt.receipt()
                if found is not None:
                    return found
                check = not known  # absent: never committed (a twin in flight can't commit)
            if not check:
                outcome, response = attempt.run(self.get_response)
                if outcome == DONE:
                    return response
                check = outcome == FATE_UNKNOWN
                log.warning(
                    "%s %s: the database went away (%s); %s",
                    request.method,
                    request.path,
                    outcome,
                    "asking its receipt" if check else "running it again",
                )
            if time.monotonic() >= deadline:
                return unavailable(request)
            _pause()


DONE, LOST, FATE_UNKNOWN = "done", "lost", "fate unknown"


class _Attempt:
    """One write: run in a transaction with its receipt, or answered from its receipt."""

    def __init__(self, request: HttpRequest, key: str, digest: str, *, replayable: bool) -> None:
        self.request, self.key, self.digest = request, key, digest
        self.path = request.get_full_path()[:2000]  # as the receipt stores it
        # Only a client's own key is ever asked again by a later request; for a key made
        # here the answer is still in hand when the receipt settles it, so no body is kept.
        self.replayable = replayable
        self.answer: HttpResponse | None = None

    def receipt(self) -> tuple[bool, HttpResponse | None]:
        """(whether the database answered, the stored answer if the write committed)."""
        try:
            row = WriteReceipt.objects.filter(key=self.key).first()
        except DATABASE_AWAY:
            return False, None
        if row is None:
            return True, None
        if (row.method, row.path, row.body_digest) != (self.request.method, self.path, self.digest):
            return True, _bad_key(self.request, "was already used for another request")
        if self.answer is not None:
            return True, self.answer  # committed on this very attempt
        if row.withheld:
            return True, _withheld(self.request)
        return True, _replay(row)

    def run(self, get_response: Any) -> tuple[str, HttpResponse]:
        """DONE (answer it), LOST (nothing committed: run again) or FATE_UNKNOWN (the
        connection went during COMMIT, or a twin under the same key committed first: ask
        the receipt)."""
        stage = "begin"
        response = unavailable(self.request)
        try:
            with transaction.atomic():
                stage = "work"
                response = get_response(self.request)
                self.answer = None
                if getattr(response, _MARK, False):
                    transaction.set_rollback(True)  # gone with the connection anyway
                    return LOST, response
                if response.status_code < 400:
                    stage = "receipt"
                    self._store(response)
                    self.answer = response
                stage = "commit"
        except IntegrityError:
            if stage != "receipt":
                raise
            return FATE_UNKNOWN, response
        except DATABASE_AWAY:
            if stage != "commit":
                return LOST, response
            # A refusal (4xx) changed nothing worth a receipt: answer it as it is.
            return (DONE if response.status_code >= 400 else FATE_UNKNOWN), response
        return DONE, response

    def _store(self, response: HttpResponse) -> None:
        # An answer marked no-store (a new API token's secret, shown once) is never written
        # down here either: a retry under its key learns that it was done, not the secret.
        secret = "no-store" in response.get("Cache-Control", "")
        keep = self.replayable and not secret and not response.streaming
        headers = {h: response[h] for h in _KEPT_HEADERS if response.has_header(h)}
        WriteReceipt.objects.create(
            key=self.key,
            method=self.request.method or "",
            path=self.path,
            body_digest=self.digest,
            status=response.status_code,
            headers=headers if keep else {},
            body=response.content if keep else b"",
            withheld=self.replayable and not keep,
        )


def _pause() -> None:
    db.connections.close_all()  # this thread's dead connections go back (dropped)
    time.sleep(SAFE_RETRY_PAUSE_S)


def _scoped(request: HttpRequest, client_key: str) -> str:
    """A client's key counts only with the credential that sent it (tenant isolation)."""
    credential = request.headers.get("Authorization") or request.COOKIES.get(
        settings.SESSION_COOKIE_NAME, ""
    )
    return hashlib.sha256(f"{credential}\n{client_key}".encode()).hexdigest()


def _replay(row: WriteReceipt) -> HttpResponse:
    response = HttpResponse(bytes(row.body), status=row.status)
    for name, value in row.headers.items():
        response[name] = value
    response["Idempotent-Replayed"] = "true"
    return response


def _withheld(request: HttpRequest) -> HttpResponse:
    """A key whose write was done, but whose answer held a secret that is shown only once."""
    message = (
        f"This {IDEMPOTENCY_HEADER} was already carried out; its answer held a secret shown "
        "only once, which is not kept. List your tokens to find it, or revoke it and make "
        "another."
    )
    return _key_refusal(request, 409, "conflict", message)


def _bad_key(request: HttpRequest, why: str) -> HttpResponse:
    return _key_refusal(request, 422, "invalid", f"{IDEMPOTENCY_HEADER} {why}")


def _key_refusal(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    """The API's error shape naming the header under /api/, plain text elsewhere."""
    if request.path.startswith("/api/"):
        body = {"code": code, "message": message, "field": IDEMPOTENCY_HEADER}
        return JsonResponse(body, status=status)
    return HttpResponse(message, status=status, content_type="text/plain")
