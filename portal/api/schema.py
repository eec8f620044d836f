"""OpenAPI helpers: the error responses every operation can give (with an example of
each), declared once, and the tags that group the operations by resource."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse

from portal.api.errors import ErrorSerializer
from portal.outage import unavailable_body

_DESCRIPTIONS = {
    400: "Malformed input; `field` names the offending one.",
    401: "Not signed in (no session, or no valid bearer token).",
    403: "Signed in, but this role or token may not do this.",
    404: "No such object, or one in a namespace you cannot see.",
    408: "The request body did not arrive in time (PORTAL_BODY_TIMEOUT_S, 30 s by default); "
    "nothing was done.",
    409: "Conflicts with the current state (name taken, wrong phase).",
    413: "The request body is over the size limit (1 MiB, the largest any operation takes); "
    "refused before it is read.",
    422: "Refused by quota or placement; `details` says why.",
    429: "Too many failed sign-in or token attempts from your address, or a request "
    "refused by a rate limit; wait the seconds Retry-After says.",
    503: "A service the answer depends on is away (PostgreSQL, or the Kubernetes API "
    "server); nothing was done: try again after the seconds Retry-After says.",
}

_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_NUM_NODES_ERROR = "Ensure this value is less than or equal to 1024."
# One real answer per status, as the exception handler words them.
_EXAMPLES: dict[int, tuple[str, dict[str, Any]]] = {
    400: (
        "A field refused",
        {
            "code": "invalid",
            "message": f"spec.numNodes: {_NUM_NODES_ERROR}",
            "field": "spec.numNodes",
            "details": {"errors": [{"field": "spec.numNodes", "message": _NUM_NODES_ERROR}]},
        },
    ),
    401: (
        "No credentials",
        {"code": "not_authenticated", "message": "Authentication credentials were not provided."},
    ),
    403: (
        "Not a member",
        {
            "code": "forbidden",
            "message": "Only members of 'team-a' may request or release its domains.",
        },
    ),
    404: ("Not visible to you", {"code": "not_found", "message": "Not found."}),
    408: (
        "Body too slow",
        {"code": "timeout", "message": "The request body did not arrive within 30 seconds."},
    ),
    409: (
        "Wrong phase",
        {
            "code": "invalid_transition",
            "message": "team-a/llm-pretrain is Ready, not waiting for approval",
        },
    ),
    413: (
        "Body too large",
        {"code": "too_large", "message": "The request body is larger than 1048576 bytes."},
    ),
    422: (
        "Over the quota",
        {
            "code": "quota_exceeded",
            "message": "over the quota of namespace team-a: "
            "gpus: 32 in use + 16 requested exceeds the quota of 40",
            "details": {"problems": ["gpus: 32 in use + 16 requested exceeds the quota of 40"]},
        },
    ),
    429: (
        "Throttled",
        {
            "code": "throttled",
            "message": "Request was throttled. Expected available in 60 seconds.",
        },
    ),
    503: ("The database is away", unavailable_body()),
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {
        code: OpenApiResponse(ErrorSerializer, description=_DESCRIPTIONS[code]) for code in codes
    }


NAMESPACE_HELP = "The namespace's name; another tenant's answers 404, as if it did not exist."

READ = (400, 401, 403, 404, 429, 503)
WRITE = (400, 401, 403, 404, 408, 409, 413, 422, 429, 503)

# The resources, in the order the docs show them; a tag is the URL's resource name.
TAGS = {
    "computedomains": "A namespace's ComputeDomains, shaped like NVIDIA's "
    "`resource.nvidia.com/v1beta1` objects: request (or try with `?dryRun=All`), read, "
    "extend, release; their timeline and workload manifests.",
    "approvals": "Requests above a namespace's approval threshold; portal admins decide.",
    "namespaces": "Tenants' namespaces and their quotas.",
    "members": "Who belongs to a namespace, and with which role.",
    "racks": "NVL72 racks: slots, cliques and tray counts.",
    "cliques": "NVLink partitions (`nvidia.com/gpu.clique`): a domain never spans two.",
    "nodes": "Compute trays: state, GPUs, the domain holding them; operators' tray actions.",
    "switchtrays": "NVLink switch trays; operators record one down or back.",
    "powershelves": "Power shelves; operators record one down or back.",
    "maintenance": "Operators' maintenance windows: no domain's lease reaches into one.",
    "events": "The audit log, newest first.",
    "tokens": "Your personal API tokens.",
    "jointokens": "The fleet's join tokens, with which agents register trays (portal admins).",
    "subscriptions": "What you are notified of, over which channel, and each delivery's log.",
    "notifications": "Your in-app inbox.",
    "agent": "The node agents' protocol (node-token auth); not for people.",
}


def _shared_response(code: int) -> dict[str, Any]:
    """The one copy of an error response under components, with its example."""
    summary, value = _EXAMPLES[code]
    response: dict[str, Any] = {
        "description": _DESCRIPTIONS[code],
        "content": {
            "application/json": {
                "schema": _ERROR_REF,
                "examples": {value["code"]: {"summary": summary, "value": value}},
            }
        },
    }
    if code in (429, 503):
        response["headers"] = {
            "Retry-After": {
                "schema": {"type": "integer", "minimum": 0},
                "description": "Seconds to wait before trying again.",
            }
        }
    return response


def _is_standard(code: str, response: dict[str, Any]) -> bool:
    """Whether an operation's error response is the shared one, word for word."""
    content = response.get("content", {}).get("application/json", {})
    return (
        code.isdigit()
        and int(code) in _EXAMPLES
        and response.get("description") == _DESCRIPTIONS[int(code)]
        and content.get("schema") == _ERROR_REF
        and set(content) == {"schema"}
    )


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> Any:
    """Postprocessing hook: document the errors with the error shape, each with an example,
    on every v1 operation, the agent API's included, so clients and schemathesis know
    them; one copy of each under components.responses, referenced from the operations."""
    components = result.setdefault("components", {})
    components.setdefault("schemas", {})
    components["responses"] = {f"Error{code}": _shared_response(code) for code in _EXAMPLES}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for code in READ if method == "get" else WRITE:
                responses.setdefault(str(code), {"$ref": f"#/components/responses/Error{code}"})
            for code, response in responses.items():
                if _is_standard(code, response):
                    responses[code] = {"$ref": f"#/components/responses/Error{code}"}
    return result


def describe_tags(result: dict[str, Any], generator: Any, request: Any, public: bool) -> Any:
    """Postprocessing hook: the tags in use, each with what it groups, resources first."""
    used = {
        tag
        for ops in result.get("paths", {}).values()
        for op in ops.values()
        for tag in (op.get("tags", []) if isinstance(op, dict) else [])
    }
    order = [*TAGS, *sorted(used - TAGS.keys())]
    result["tags"] = [
        {"name": tag, **({"description": TAGS[tag]} if tag in TAGS else {})}
        for tag in order
        if tag in used
    ]
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
