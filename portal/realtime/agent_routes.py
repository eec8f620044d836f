"""Websocket routes for node agents ("your desired state changed").

Not wrapped in `auth.browser()`: agents are not browsers and authenticate with their node
token in the handshake's Authorization header (see agent.py).
"""

from __future__ import annotations

from django.urls import path

from portal.realtime.agent import AgentConsumer

agent_websocket_urlpatterns: list = [
    path("ws/agent/", AgentConsumer.as_asgi()),
]
