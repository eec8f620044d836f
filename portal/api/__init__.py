"""REST API v1 under /api/v1/ (the agent API under /api/v1/agent/ is separate).

Resources (a trailing slash is optional):

    racks/  cliques/  nodes/                 every signed-in user reads; tenants see trays
    nodes/{hostname}/cordon|uncordon|drain   in use but only their own domains' names
    nodes/{hostname}/mark-down|mark-up       (operators: POST, body {"reason"}; 409 when it
                                             changes nothing or the tray's domain runs)
    namespaces/                              yours (operators: all); POST: portal admins
    namespaces/{ns}/quota                    GET members; PUT/PATCH portal admins
    namespaces/{ns}/members/{username}       GET members; PUT {"role"}/DELETE: ns admins
    namespaces/{ns}/computedomains/          GET; POST a ComputeDomain (?dryRun=All)
    namespaces/{ns}/computedomains/{name}    GET; DELETE = release
        …/extend {"by": "4h"}  …/manifests  …/events
    events/                                  the audit log you may see
    approvals/{uid}/approve|deny             portal admins
    tokens/                                  your own API tokens (secret shown once)
    schema/  docs/                           OpenAPI 3 and Swagger UI (no CDN)

Authentication: `Authorization: Bearer dpt_…` (tokens from the UI or `manage.py
create_token USER`), or the browser session with its CSRF token. Read-only tokens may only
GET. Errors always look like {"code", "message", "field"?, "details"?}: 400 malformed
(`field` is the dotted path in the body), 401/403, 404 for anything in a namespace you
cannot see, 409 conflicts, 422 quota or placement refusals, 429 too many failed sign-ins.

Structure: `base.ScopedViewSet` (every viewset's queryset is a selector call with the
caller), `selectors` (API-only reads), `serializers/` (output camelCase like Kubernetes
objects; strict input), `views/` (parse, call one service, render), `errors`, `schema`.
"""
