"""The browsers' live socket: `ws/live/?topics=me,fabric,namespace:<name>,domain:<uid>`.

A page names the topics it shows; the consumer joins the Channels group of each topic the
user may see (others are silently dropped, so a tenant cannot listen to another namespace)
and forwards every message as JSON. Messages are only hints ("domain X changed"); the page
re-fetches its partials over HTTP, where the usual permission checks apply again.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from domains.computedomains.selectors import domains_visible_to
from domains.tenancy.selectors import Viewer, is_operator, namespaces_visible_to
from portal.realtime.groups import (
    BACKING_AWAY,
    LAYER_LOSS,
    SOCKETS,
    ClosesWhenBackingAway,
    domain_group,
    fabric_group,
    namespace_group,
    refuse_over_cap,
    session_group,
    try_again_later,
    user_group,
    user_sockets_group,
)

MAX_TOPICS = 20


def groups_for(user: Viewer, topics: list[str]) -> list[str]:
    """The groups behind the topics this user may follow; no topics: everything they see."""
    if not user.is_authenticated:
        return []
    if not topics:
        if is_operator(user):
            return [fabric_group()]
        visible = namespaces_visible_to(user).values_list("pk", flat=True)
        return [namespace_group(pk) for pk in visible]
    groups: list[str] = []
    for topic in topics[:MAX_TOPICS]:
        kind, _, value = topic.partition(":")
        if kind == "me":  # the signed-in user's own group, never anybody else's
            groups.append(user_group(user.pk))
        elif kind == "fabric" and is_operator(user):
            groups.append(fabric_group())
        elif kind == "namespace":
            pk = namespaces_visible_to(user).filter(name=value).values_list("pk", flat=True).first()
            if pk is not None:
                groups.append(namespace_group(pk))
        elif (
            kind == "domain"
            and _is_uuid(value)
            and domains_visible_to(user).filter(uid=value).exists()
        ):
            groups.append(domain_group(value))
    return groups


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class LiveConsumer(ClosesWhenBackingAway, AsyncJsonWebsocketConsumer):
    """One per open page. Refuses anonymous users and users over their socket cap
    (PORTAL_SOCKETS_PER_USER); says hello with its topic count. Besides its topics' groups
    it joins its user's and its session's: when a membership ends it leaves the groups it
    may no longer follow, and when the session logs out it closes."""

    groups_joined: list[str]
    topics: list[str]
    counted: str = ""

    async def connect(self) -> None:
        self.groups_joined, self.topics = [], []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not SOCKETS.take(f"user:{user.pk}", settings.PORTAL["SOCKETS_PER_USER"]):
            await refuse_over_cap(self)
            return
        self.counted = f"user:{user.pk}"
        try:
            query = parse_qs(self.scope.get("query_string", b"").decode())
            self.topics = [t for raw in query.get("topics", []) for t in raw.split(",") if t]
            allowed = await database_sync_to_async(groups_for)(user, self.topics)
            await self._join([*self._own_groups(user), *allowed])
            LAYER_LOSS.recovered()
        except BACKING_AWAY as exc:  # PostgreSQL or Redis away: the page reconnects later
            await try_again_later(self, exc)
            return
        await self.accept()
        await self.send_json({"kind": "hello", "topics": len(allowed)})

    def _own_groups(self, user: Viewer) -> list[str]:
        """Its user's and its session's groups (a signed-in user always has a pk)."""
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        return [user_sockets_group(int(user.pk or 0))] + ([session_group(key)] if key else [])

    async def _join(self, groups: list[str]) -> None:
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)

    async def disconnect(self, code: int) -> None:
        if self.counted:
            SOCKETS.give_back(self.counted)
            self.counted = ""
        for group in self.groups_joined:
            with contextlib.suppress(*BACKING_AWAY):  # Redis away: its keys expire anyway
                await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = []

    async def access_changed(self, event: dict[str, Any]) -> None:
        """A membership of this user ended: leave every group the topics no longer allow,
        and tell the page (it may reload what it shows)."""
        user = self.scope["user"]
        allowed = set(await database_sync_to_async(groups_for)(user, self.topics))
        allowed.update(self._own_groups(user))
        for group in [g for g in self.groups_joined if g not in allowed]:
            with contextlib.suppress(*BACKING_AWAY):
                await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = [g for g in self.groups_joined if g in allowed]
        topics = len([g for g in self.groups_joined if g not in self._own_groups(user)])
        await self.send_json({"kind": "access", "topics": topics})

    async def session_ended(self, event: dict[str, Any]) -> None:
        """The session logged out: the socket closes (the page signs in again)."""
        await self.close(code=4401)

    async def receive(self, text_data: Any = None, bytes_data: Any = None, **kwargs: Any) -> None:
        """Browsers only listen; anything they send is ignored. Never parsed, so
        no message (JSON nested 100,000 deep) can cost more than its receipt."""

    async def live_update(self, event: dict[str, Any]) -> None:
        # A hint on its way through a group this socket has just left is not for it.
        through = event.get("groups")
        if through is not None and not set(through) & set(self.groups_joined):
            return
        await self.send_json(event["payload"])
