"""HTTP middleware: a request id for every request, echoed in the response."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from domains.context import new_request_id, request_id_scope

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def request_id_from(incoming: str) -> str:
    """The caller's X-Request-ID when it is well-formed, otherwise a new one."""
    return incoming if _SAFE_ID.match(incoming) else new_request_id()


class RequestIdMiddleware:
    """Take X-Request-ID when it is well-formed, otherwise mint one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        rid = request_id_from(request.headers.get("X-Request-ID", ""))
        with request_id_scope(rid):
            request.request_id = rid  # type: ignore[attr-defined]
            response = self.get_response(request)
        response["X-Request-ID"] = rid
        return response
