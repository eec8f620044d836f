"""drf-spectacular's settings (`SPECTACULAR_SETTINGS`), kept apart from `portal.settings` for
its length: the schema's title, its enum names and the hooks that finish it."""

from __future__ import annotations

SPECTACULAR_SETTINGS = {
    "TITLE": "Domain Portal API",
    "DESCRIPTION": "ComputeDomains, fabric inventory, quotas and the node-agent protocol.",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Without deep links an operation's path is not a link inside its toggle button: a
    # control inside a control is unusable by keyboard and screen reader (axe).
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "ReadinessEnum": ["Ready", "NotReady"],
        "ConditionStatusEnum": ["True", "False", "Unknown"],
        "ActorKindEnum": "domains.audit.models.ActorKind",
        "RoleEnum": "domains.tenancy.models.Role",
        "NodeStateEnum": "domains.inventory.models.NodeState",
        "ObjectKindEnum": ["ComputeDomain"],
        "NotificationKindEnum": "domains.notifications.models.Kind",
        "NotificationStatusEnum": "domains.notifications.models.Status",
        "PartStateEnum": "domains.inventory.models.PartState",
        "BlastScopeKindEnum": ["tray", "trays", "switch_tray", "rack", "clique", "power_shelf"],
        "TrayStatusEnum": [
            "free",
            "in_use",
            "cordoned",
            "draining",
            "down",
            "unknown",
            "stale",
            "no_address",
            "blocked",
            "foreign",
        ],
        "AgentReportingEnum": ["reporting", "silent", "never"],
        "ReplacePolicyEnum": "domains.computedomains.models.ReplacePolicy",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.schema.add_error_responses",
        "portal.api.schema.describe_tags",
    ],
}
