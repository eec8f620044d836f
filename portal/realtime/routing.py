"""Websocket routes: the agents' nudge socket and the browsers' live updates.

Each list lives beside its consumers; this module only joins them for `portal.asgi`.
"""

from __future__ import annotations

from portal.realtime.agent_routes import agent_websocket_urlpatterns
from portal.realtime.browser_routes import websocket_urlpatterns

__all__ = ["agent_websocket_urlpatterns", "websocket_urlpatterns"]
