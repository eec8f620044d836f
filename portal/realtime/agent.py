"""The agents' nudge socket: "your desired state changed", nothing else.

An agent holds `ws/agent/` open with its node token (`Authorization: Node <token>`) and is
put in `groups.agent_group(node_id)`. When the business announces
`signals.desired_state_changed` (after commit), every named tray's group gets one message;
the agent then fetches its desired state over HTTP. Nothing else travels here, so a lost
message costs only the fallback poll's latency.
"""

from __future__ import annotations

import contextlib
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.dispatch import receiver

from domains import signals
from domains.agents.selectors import node_for_token
from portal.api.agent.auth import token_from_header
from portal.realtime.groups import (
    BACKING_AWAY,
    LAYER_LOSS,
    SOCKETS,
    ClosesWhenBackingAway,
    agent_group,
    refuse_over_cap,
    send_to_groups,
    try_again_later,
)

NUDGE = {"type": "desired_state_changed"}


class AgentConsumer(ClosesWhenBackingAway, AsyncJsonWebsocketConsumer):
    """One per tray's agent; at most PORTAL_SOCKETS_PER_NODE per tray and web process (an
    agent holds one; a reconnect may overlap the old one for a moment)."""

    group: str = ""
    counted: str = ""

    async def connect(self) -> None:
        headers = dict(self.scope.get("headers") or [])
        raw = token_from_header(headers.get(b"authorization", b""))
        try:
            node = await database_sync_to_async(node_for_token)(raw) if raw else None
            if node is None:
                await self.close(code=4401)  # refused before accept: the handshake fails
                return
            if not SOCKETS.take(f"node:{node.pk}", settings.PORTAL["SOCKETS_PER_NODE"]):
                await refuse_over_cap(self)
                return
            self.counted = f"node:{node.pk}"
            self.group = agent_group(node.pk)
            await self.channel_layer.group_add(self.group, self.channel_name)
            LAYER_LOSS.recovered()
        except BACKING_AWAY as exc:  # PostgreSQL or Redis away: the agent polls meanwhile
            self.group = ""
            await try_again_later(self, exc)
            return
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.counted:
            SOCKETS.give_back(self.counted)
            self.counted = ""
        if self.group:
            with contextlib.suppress(*BACKING_AWAY):  # Redis away: its key expires anyway
                await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: Any = None, bytes_data: Any = None, **kwargs: Any) -> None:
        """Agents have nothing to say here; they report over HTTP. Never parsed, so
        no message (JSON nested 100,000 deep) can cost more than its receipt."""

    async def desired_changed(self, event: dict[str, Any]) -> None:
        await self.send_json(NUDGE)


@receiver(signals.desired_state_changed, dispatch_uid="portal.realtime.agent.nudge")
def nudge_agents(sender: Any, node_ids: list[int], **kwargs: Any) -> None:
    """Tell these trays' agents to re-fetch now. Best effort: their poll is the fallback."""
    send_to_groups([agent_group(i) for i in node_ids], {"type": "desired.changed"})
