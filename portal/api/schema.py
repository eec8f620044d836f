"""OpenAPI helpers: the error responses every operation can give, declared once."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse

from portal.api.errors import ErrorSerializer

_DESCRIPTIONS = {
    400: "Malformed input; `field` names the offending one.",
    401: "Not signed in (no session, or no valid bearer token).",
    403: "Signed in, but this role or token may not do this.",
    404: "No such object, or one in a namespace you cannot see.",
    409: "Conflicts with the current state (name taken, wrong phase).",
    413: "The request body is over the API's size limit (1 MiB).",
    422: "Refused by quota or placement; `details` says why.",
    429: "Too many failed sign-in or token attempts from your address, or a request "
    "refused by a rate limit; wait the seconds Retry-After says.",
    503: "A service the answer depends on is away (the Kubernetes API server); try again.",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {
        code: OpenApiResponse(ErrorSerializer, description=_DESCRIPTIONS[code]) for code in codes
    }


READ = (400, 401, 403, 404, 429)
WRITE = (400, 401, 403, 404, 409, 413, 422, 429)


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> Any:
    """Postprocessing hook: document the errors with the error shape on every v1 operation,
    the agent API's included, that does not declare them itself, so clients and
    schemathesis know them."""
    error_ref = {"$ref": "#/components/schemas/Error"}
    result.setdefault("components", {}).setdefault("schemas", {})
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            codes = READ if method == "get" else WRITE
            for code in codes:
                responses.setdefault(
                    str(code),
                    {
                        "content": {"application/json": {"schema": error_ref}},
                        "description": _DESCRIPTIONS[code],
                    },
                )
    return result


class NodeTokenScheme(OpenApiAuthenticationExtension):
    """Documents the agent API's `Authorization: Node <token>` (portal/api/agent/auth.py)
    in the one schema, which also keeps `check --deploy` free of schema warnings."""

    target_class = "portal.api.agent.auth.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Node <token>`: the per-tray token an agent receives when it joins.",
        }
