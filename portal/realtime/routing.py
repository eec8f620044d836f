"""Websocket routes.

Browser routes go through `browser()` (session auth and an Origin check); the agent route
does not (agents are not browsers and authenticate with their node token).
"""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator


def browser(app: Any) -> Any:
    return AllowedHostsOriginValidator(AuthMiddlewareStack(app))


agent_websocket_urlpatterns: list = []
websocket_urlpatterns: list = []
