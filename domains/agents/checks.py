"""`manage.py check --deploy`: agent enrolment settings a production portal must not keep."""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from django.core import checks

from domains.agents.joining import DEMO_JOIN_TOKEN


@checks.register(checks.Tags.security, deploy=True)
def demo_join_token(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    """The demo's join token is public and refused with DEBUG off: agents could not join."""
    configured = settings.PORTAL["AGENT_JOIN_TOKEN"]
    if settings.DEBUG or not hmac.compare_digest(configured.encode(), DEMO_JOIN_TOKEN.encode()):
        return []
    return [
        checks.Warning(
            "PORTAL_AGENT_JOIN_TOKEN is the demo's public join token, which is refused with "
            "DEBUG off: no agent can join with it.",
            hint="Set a token of your own (e.g. openssl rand -hex 24), or on Kubernetes let "
            "the agents join with their service-account tokens (docs/kubernetes.md).",
            id="agents.W001",
        )
    ]
