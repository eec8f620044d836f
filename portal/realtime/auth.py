"""Websocket auth wrappers.

Browser routes go through `browser()` (session auth and an Origin check); agent routes do
not (agents are not browsers and authenticate with their node token).
"""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator


def browser(app: Any) -> Any:
    return AllowedHostsOriginValidator(AuthMiddlewareStack(app))
