"""Websocket routes for browsers (live pages). Wrap every consumer with `browser()`."""

from __future__ import annotations

from django.urls import path

from portal.realtime.auth import browser
from portal.realtime.consumers import LiveConsumer

websocket_urlpatterns: list = [
    path("ws/live/", browser(LiveConsumer.as_asgi())),
]
