"""Names of the Channels groups that live updates travel through."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)
SEND_TIMEOUT_S = 5.0


def domain_group(domain_uid: str) -> str:
    return f"domain.{domain_uid}"


def namespace_group(namespace_id: int) -> str:
    return f"namespace.{namespace_id}"


def fabric_group() -> str:
    """Operators' fabric view: every tray and domain change."""
    return "fabric"


def agent_group(node_id: int) -> str:
    """One tray's agent: told only that its desired state changed."""
    return f"agent.{node_id}"


def send_to_groups(groups: list[str], message: dict[str, Any]) -> None:
    """Send one message to several groups from synchronous code, best effort.

    Callers are after-commit signal receivers: the change is already committed, so a down
    Redis must not fail it (pages and agents catch up on reconnect or their next poll).
    """
    layer = get_channel_layer()
    if layer is None or not groups:
        return

    async def fan_out() -> None:
        await asyncio.gather(*(layer.group_send(g, message) for g in groups))

    try:
        if _loop_running_here():
            # Sync code called on an event-loop thread (a test driving Playwright's sync API,
            # a sync call inside an async shell) cannot use async_to_sync there: hand the
            # send to a short-lived thread of its own.
            worker = threading.Thread(target=async_to_sync(fan_out), daemon=True)
            worker.start()
            worker.join(SEND_TIMEOUT_S)
        else:
            async_to_sync(fan_out)()
    except Exception:
        log.warning("could not send %s to %s", message.get("type"), groups, exc_info=True)


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
