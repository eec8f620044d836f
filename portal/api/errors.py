"""One error shape for the whole API: {"code", "message", "field"?, "details"?}.

Business errors (domains.errors) carry their own stable code and HTTP status. DRF's own
exceptions are mapped to the same shape here; validation errors are flattened to dotted
field paths as they appear in the request body (`spec.channel.allocationMode`), the first
one in `field`/`message` and all of them in `details.errors`.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from django.views import csrf, defaults
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import set_rollback

from domains.errors import DomainError, database_away
from portal.api.parsers import PayloadTooLarge
from portal.outage import RETRY_AFTER_S, unavailable, unavailable_body

# Stable codes for DRF's exceptions (clients branch on these, never on messages).
_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.ParseError: "malformed",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    PayloadTooLarge: "too_large",
}


class ErrorSerializer(serializers.Serializer):
    """The body of every 4xx answer."""

    code = serializers.CharField(help_text="Stable, machine-readable, e.g. `quota_exceeded`.")
    message = serializers.CharField(help_text="One human sentence.")
    field = serializers.CharField(
        required=False, help_text="Dotted path of the offending input, e.g. `spec.numNodes`."
    )
    details = serializers.JSONField(
        required=False, help_text="More context: `errors` (every field error), reasons …"
    )


def flatten(detail: Any, path: str = "") -> list[dict[str, str]]:
    """DRF's nested error dict/list → [{field, message}] with dotted paths."""
    if isinstance(detail, dict):
        out: list[dict[str, str]] = []
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            out += flatten(value, f"{path}.{name}" if path and name else path or name)
        return out
    if isinstance(detail, list):
        if detail and all(isinstance(item, str) for item in detail):
            return [{"field": path, "message": str(item)} for item in detail]
        out = []
        for index, item in enumerate(detail):
            out += flatten(item, f"{path}[{index}]")
        return out
    return [{"field": path, "message": str(detail)}]


def _validation_body(exc: exceptions.ValidationError) -> dict[str, Any]:
    errors = flatten(exc.detail) or [{"field": "", "message": "invalid input"}]
    first = errors[0]
    message = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    body: dict[str, Any] = {"code": "invalid", "message": message}
    if first["field"]:
        body["field"] = first["field"]
    body["details"] = {"errors": errors}
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        set_rollback()
        return Response(exc.as_dict(), status=exc.http_status)
    if database_away(exc):  # PostgreSQL away: try again, not a bug (portal.outage)
        response = Response(
            unavailable_body(), status=503, headers={"Retry-After": str(RETRY_AFTER_S)}
        )
        response.database_away = True  # type: ignore[attr-defined]  # a safe request retries
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):  # Django's own bound, past ours: still 413
        exc = PayloadTooLarge()
    elif isinstance(exc, SuspiciousOperation):  # too many fields, a bad multipart …
        exc = exceptions.ParseError(str(exc) or "Malformed request.")
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: let Django answer 500 and log it
    set_rollback()
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
    if isinstance(exc, exceptions.ValidationError):
        body = _validation_body(exc)
    else:
        code = next((c for t, c in _CODES.items() if isinstance(exc, t)), "error")
        body = {"code": code, "message": str(exc.detail)}
    return Response(body, status=exc.status_code, headers=headers)


def not_found(request: Any, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any other URL under /api/v1/: a 404 in the API's shape, not Django's HTML page."""
    return JsonResponse(
        {"code": "not_found", "message": f"no API endpoint at {request.path}"}, status=404
    )


def _is_api(request: Any) -> bool:
    return str(getattr(request, "path", "")).startswith("/api/")


def bad_request(request: Any, exception: Exception, *args: Any, **kwargs: Any) -> Any:
    """Django's 400 (a body over DATA_UPLOAD_MAX_MEMORY_SIZE, too many fields): the API's
    error shape under /api/, Django's page elsewhere."""
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse(
            {"code": "too_large", "message": "The request body is too large."}, status=413
        )
    return JsonResponse({"code": "malformed", "message": "Malformed request."}, status=400)


def permission_denied(request: Any, exception: Exception, *args: Any, **kwargs: Any) -> Any:
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return JsonResponse({"code": "forbidden", "message": "Permission denied."}, status=403)


def server_error(request: Any, *args: Any, **kwargs: Any) -> Any:
    if database_away(sys.exc_info()[1]):  # PostgreSQL away anywhere in the request: 503
        return unavailable(request)
    if not _is_api(request):
        return defaults.server_error(request)
    message = "The portal failed to handle this request; it has been logged."
    return JsonResponse({"code": "server_error", "message": message}, status=500)


def csrf_failure(request: Any, reason: str = "") -> Any:
    """CSRF_FAILURE_VIEW: a signed-in browser's POST without the CSRF token. JSON under
    /api/ (scripts use bearer tokens, which need no CSRF token)."""
    if not _is_api(request):
        return csrf.csrf_failure(request, reason=reason)
    message = f"CSRF check failed: {reason}" if reason else "CSRF check failed."
    return JsonResponse({"code": "csrf_failed", "message": message}, status=403)
