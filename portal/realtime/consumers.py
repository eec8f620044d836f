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

from domains.computedomains.selectors import domains_visible_to
from domains.tenancy.selectors import Viewer, is_operator, namespaces_visible_to
from portal.realtime.groups import (
    BACKING_AWAY,
    LAYER_LOSS,
    ClosesWhenBackingAway,
    domain_group,
    fabric_group,
    namespace_group,
    try_again_later,
    user_group,
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
    """One per open page. Refuses anonymous users; says hello with its topic count."""

    groups_joined: list[str]

    async def connect(self) -> None:
        self.groups_joined = []
        try:
            user = self.scope.get("user")
            if user is None or not user.is_authenticated:
                await self.close(code=4401)
                return
            query = parse_qs(self.scope.get("query_string", b"").decode())
            topics = [t for raw in query.get("topics", []) for t in raw.split(",") if t]
            self.groups_joined = await database_sync_to_async(groups_for)(user, topics)
            for group in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
            LAYER_LOSS.recovered()
        except BACKING_AWAY as exc:  # PostgreSQL or Redis away: the page reconnects later
            self.groups_joined = []
            await try_again_later(self, exc)
            return
        await self.accept()
        await self.send_json({"kind": "hello", "topics": len(self.groups_joined)})

    async def disconnect(self, code: int) -> None:
        for group in self.groups_joined:
            with contextlib.suppress(*BACKING_AWAY):  # Redis away: its keys expire anyway
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: Any = None, bytes_data: Any = None, **kwargs: Any) -> None:
        """Browsers only listen; anything they send is ignored. Never parsed, so
        no message (JSON nested 100,000 deep) can cost more than its receipt."""

    async def live_update(self, event: dict[str, Any]) -> None:
        await self.send_json(event["payload"])
