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

import os
import time
from typing import Any

from django import db
from django.http import HttpRequest, HttpResponse, JsonResponse

from domains.errors import DATABASE_AWAY

# Seconds a client is asked to wait: about what a PostgreSQL restart or failover takes.
RETRY_AFTER_S = 5

MESSAGE = "The database is unavailable for a moment; try again shortly."

# A read that lost the database is tried again for this long before it answers 503.
SAFE_RETRY_S = float(os.environ.get("PORTAL_DB_RETRY_S", 5))
SAFE_RETRY_PAUSE_S = 0.5
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_MARK = "database_away"

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Unavailable · Domain Portal</title></head>
<body style="font-family: sans-serif; margin: 3rem;">
<h1>Back in a moment</h1>
<p>{message} Nothing you submitted was lost or half-done.</p>
</body></html>
"""


def database_away(exc: BaseException | None) -> bool:
    return isinstance(exc, DATABASE_AWAY)


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
    """A view that lost the database answers 503, not 500.

    A safe request (GET, HEAD, OPTIONS: nothing written, so nothing half-done) that lost
    its connection is tried again on a fresh one for up to `SAFE_RETRY_S` first: a
    PostgreSQL restart or failover takes a second or two, and a read in flight when it
    happened then answers 200 instead of 503. Writes are never repeated behind the client's
    back (it cannot know whether the commit happened): they answer 503 at once.
    """

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse = self.get_response(request)
        if request.method not in SAFE_METHODS or not getattr(response, _MARK, False):
            return response
        deadline = time.monotonic() + SAFE_RETRY_S
        while getattr(response, _MARK, False) and time.monotonic() < deadline:
            db.connections.close_all()  # this thread's dead connections go back (dropped)
            time.sleep(SAFE_RETRY_PAUSE_S)
            response = self.get_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not database_away(exception):
            return None
        return unavailable(request)
