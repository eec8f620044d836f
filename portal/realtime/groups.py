"""Names of the Channels groups that live updates travel through."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import os
import threading
from typing import Any

from channels.layers import get_channel_layer
from redis.exceptions import RedisError

from domains.errors import DATABASE_AWAY

log = logging.getLogger(__name__)

# What a websocket handshake may lose on the way: Redis (the channel layer) or PostgreSQL
# (the session or token lookup). docs/reliability.md: never a 500 for an outage.
BACKING_AWAY: tuple[type[BaseException], ...] = (RedisError, OSError, *DATABASE_AWAY)


async def try_again_later(consumer: Any, exc: BaseException) -> None:
    """Accept the socket and close it at once with 1013 (Try Again Later): the client
    reconnects as after any close, instead of its handshake failing with a 500."""
    log.warning("websocket refused for now: %s: %s", type(exc).__name__, exc)
    await consumer.accept()
    await consumer.close(code=1013)


class _LayerLoss:
    """Whether this process has said that open sockets lost the channel layer: said once
    per outage, however many sockets it closes, and unsaid by the next socket that joins a
    group (Redis answers again)."""

    def __init__(self) -> None:
        self.reported = False

    def report(self, exc: BaseException) -> None:
        if not self.reported:
            self.reported = True
            log.warning(
                "live sockets lost the channel layer (%s: %s); open ones are closed with "
                "1011 and hints dropped until it answers again (clients reconnect)",
                type(exc).__name__,
                exc,
            )

    def recovered(self) -> None:
        if self.reported:
            self.reported = False
            log.warning("live sockets: the channel layer answers again")


LAYER_LOSS = _LayerLoss()


class ClosesWhenBackingAway:
    """Mixin for consumers: when the channel layer (or the database) goes away under an
    open socket, close it with 1011 (Internal Error; clients reconnect after any close)
    instead of letting the error escape into uvicorn's "Exception in ASGI application"
    traceback, one per socket. The outage is logged once per process (LAYER_LOSS)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)  # type: ignore[misc]
        except BACKING_AWAY as exc:
            LAYER_LOSS.report(exc)
            with contextlib.suppress(Exception):  # the client may be gone already
                await send({"type": "websocket.close", "code": 1011})


def domain_group(domain_uid: str) -> str:
    return f"domain.{domain_uid}"


def namespace_group(namespace_id: int) -> str:
    return f"namespace.{namespace_id}"


def fabric_group() -> str:
    """Operators' fabric view: every tray and domain change."""
    return "fabric"


def user_group(user_id: int) -> str:
    """One person's own hints (a new in-app notification), on every page they have open."""
    return f"user.{user_id}"


def user_sockets_group(user_id: int) -> str:
    """Every live socket of one person, for telling them their access changed (a membership
    ended): each socket then leaves the groups it may no longer follow."""
    return f"sockets.user.{user_id}"


def session_group(session_key: str) -> str:
    """Every live socket of one browser session, closed when that session logs out."""
    return f"sockets.session.{hashlib.sha256(session_key.encode()).hexdigest()[:32]}"


def agent_group(node_id: int) -> str:
    """One tray's agent: told only that its desired state changed."""
    return f"agent.{node_id}"


class SocketCounts:
    """Open sockets per key (a user, a tray) in this process, each key capped: one user's
    pages, one tray's agent, cannot hold hundreds of sockets (500 on one node token were
    held). Per web process: exact, and nothing to leak when a process dies."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def take(self, key: str, limit: int) -> bool:
        """Count one more socket for `key` unless it holds `limit` already."""
        if self._open.get(key, 0) >= limit:
            return False
        self._open[key] = self._open.get(key, 0) + 1
        return True

    def give_back(self, key: str) -> None:
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
        else:
            self._open.pop(key, None)


SOCKETS = SocketCounts()
# Close code for a socket over its key's cap: try again later (after others closed).
TOO_MANY_SOCKETS = 4429


async def refuse_over_cap(consumer: Any) -> None:
    """Accept and close at once with TOO_MANY_SOCKETS: the client learns why (a refused
    handshake reads as a bad credential) and backs off before it reconnects."""
    await consumer.accept()
    await consumer.close(code=TOO_MANY_SOCKETS)


def send_to_groups(groups: list[str], message: dict[str, Any], *, barrier: bool = False) -> None:
    """Send one message to several groups from synchronous code, best effort, without waiting.

    Callers are after-commit signal receivers: the change is already committed, so a down
    Redis must not fail it (pages and agents catch up on reconnect or their next poll).
    The send runs on this process's sender loop; the caller only queues it. Sends run
    concurrently, in no set order, but a `barrier` (a membership ended, a session logged
    out) is delivered before anything this process queues after it: a hint caused after a
    membership ended never overtakes the message that takes the socket off its groups.
    """
    layer = get_channel_layer()
    if layer is None or not groups:
        return
    _SENDER.submit(layer, list(groups), message, barrier=barrier)


class _Sender:
    """One event loop per process, on its own thread, that carries every live hint.

    `async_to_sync` per message would build a fresh event loop, and with it a fresh Redis
    connection pool in channels-redis, for every hint (four hints per agent report), making
    live updates a large share of a status report's cost. A long-lived loop keeps one pool,
    and callers never wait for Redis. Created lazily and per PID, so a forked Celery child
    gets its own. A bounded backlog protects memory when
    Redis is down: hints beyond it are dropped (they are only hints).
    """

    MAX_IN_FLIGHT = 2000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._in_flight = 0
        self._barrier: concurrent.futures.Future[None] | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if self._loop is None or self._pid != os.getpid() or not alive:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="live-sender", daemon=True
                )
                self._thread.start()
                self._pid, self._in_flight = os.getpid(), 0
            return self._loop

    def submit(
        self, layer: Any, groups: list[str], message: dict[str, Any], *, barrier: bool = False
    ) -> None:
        loop = self._running_loop()
        with self._lock:  # in the order queued: a barrier is the one before what follows it
            if self._in_flight >= self.MAX_IN_FLIGHT:
                log.warning("live sender backlog full; dropped %s", message.get("type"))
                return
            self._in_flight += 1
            after = self._barrier
            sent = asyncio.run_coroutine_threadsafe(
                self._fan_out(layer, groups, message, after), loop
            )
            if barrier:
                self._barrier = sent

    async def _fan_out(
        self, layer: Any, groups: list[str], message: dict[str, Any], after: Any = None
    ) -> None:
        try:
            if after is not None and not after.done():
                with contextlib.suppress(Exception):  # a barrier that failed still passed
                    await asyncio.wrap_future(after)
            await asyncio.gather(*(layer.group_send(g, message) for g in groups))
        except BACKING_AWAY as exc:  # said once per outage, not once per hint
            LAYER_LOSS.report(exc)
        except Exception:
            log.warning("could not send %s to %s", message.get("type"), groups, exc_info=True)
        else:
            LAYER_LOSS.recovered()
        finally:
            with self._lock:
                self._in_flight -= 1

    def reset_after_fork(self) -> None:
        """A forked child inherits neither the thread nor, safely, the lock."""
        self._lock = threading.Lock()
        self._loop, self._thread, self._pid, self._in_flight = None, None, 0, 0
        self._barrier = None


_SENDER = _Sender()
os.register_at_fork(after_in_child=_SENDER.reset_after_fork)
