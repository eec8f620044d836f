"""The browsers' live socket: who may listen to what, and that a committed change reaches
the listeners of its domain, its namespace and the operators."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import AnonymousUser

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.trays import tray_act
from domains.inventory.services import node_cordon
from portal.realtime.consumers import LiveConsumer, groups_for
from portal.realtime.groups import domain_group, fabric_group, namespace_group
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db(transaction=True)


class Socket(ApplicationCommunicator):
    """A browser's end of `ws/live/` (channels.testing would import daphne, which we lack)."""

    def __init__(self, user, topics: str) -> None:
        scope = {
            "type": "websocket",
            "path": "/ws/live/",
            "query_string": f"topics={topics}".encode(),
            "headers": [],
            "subprotocols": [],
            "user": user,
        }
        super().__init__(LiveConsumer.as_asgi(), scope)

    async def connect(self) -> bool:
        await self.send_input({"type": "websocket.connect"})
        return (await self.receive_output(5))["type"] == "websocket.accept"

    async def receive_json_from(self, timeout: float = 5) -> dict:
        message = await self.receive_output(timeout)
        assert message["type"] == "websocket.send", message
        return json.loads(message["text"])

    async def disconnect(self) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.wait(1)


def test_a_tenant_may_follow_only_its_own_namespace_and_domains(
    ns_a, ns_b, tenant_a, tenant_b, operator, topology
):
    domain = request_domain(ns_a, tenant_a, "mine", num_nodes=1)
    topics = ["fabric", "namespace:team-a", "namespace:team-b", f"domain:{domain.uid}", "domain:x"]
    assert groups_for(tenant_a, topics) == [namespace_group(ns_a.pk), domain_group(str(domain.uid))]
    assert groups_for(tenant_b, topics) == [namespace_group(ns_b.pk)]
    assert fabric_group() in groups_for(operator, topics)
    assert groups_for(AnonymousUser(), topics) == []


async def _connect(user, topics: str) -> Socket:
    comm = Socket(user, topics)
    assert await comm.connect()
    hello = await comm.receive_json_from(timeout=5)
    assert hello["kind"] == "hello"
    return comm


def test_anonymous_sockets_are_refused():
    async def run() -> None:
        comm = Socket(AnonymousUser(), "fabric")
        assert not await comm.connect()

    async_to_sync(run)()


def test_a_domain_change_reaches_its_tenant_and_operators_but_not_other_tenants(
    ns_a, tenant_a, tenant_b, operator, topology
):
    async def run() -> None:
        mine = await _connect(tenant_a, "namespace:team-a")
        other = await _connect(tenant_b, "namespace:team-b")
        ops = await _connect(operator, "fabric")
        domain = await sync_to_async(request_domain)(ns_a, tenant_a, "live", num_nodes=1)
        seen = await mine.receive_json_from(timeout=5)
        assert seen["uid"] == str(domain.uid)
        assert (await ops.receive_json_from(timeout=5))["uid"] == str(domain.uid)
        assert await other.receive_nothing(timeout=0.5)
        for comm in (mine, other, ops):
            await comm.disconnect()

    async_to_sync(run)()


def test_a_cordon_reaches_the_operators_fabric_view(operator, topology):
    node = topology.nodes.first()

    async def run() -> None:
        ops = await _connect(operator, "fabric")
        await sync_to_async(node_cordon)(actor=Actor.for_user(operator), node=node, reason="")
        message = await ops.receive_json_from(timeout=5)
        assert message == {"kind": "node", "ids": [node.pk]}
        await ops.disconnect()

    async_to_sync(run)()


def test_an_uncordon_reaches_the_tenants_open_domain_page(ns_a, tenant_a, operator, topology):
    """A tray of a running domain back in service is news to its tenant, not only to the
    operators' fabric view: the domain's page hears it, and its timeline says it."""
    domain = form(request_domain(ns_a, tenant_a, "back", num_nodes=1))
    tray = domain.members.get().node
    actor = Actor.for_user(operator)
    tray_act(actor=actor, node=tray, action="cordon")

    async def run() -> None:
        page = await _connect(tenant_a, f"domain:{domain.uid}")
        await sync_to_async(tray_act)(actor=actor, node=tray, action="uncordon")
        message = await page.receive_json_from(timeout=5)
        assert message["kind"] == "event" and message["uid"] == str(domain.uid)
        await page.disconnect()

    async_to_sync(run)()
    back = Event.objects.get(domain=domain, verb="domain.tray_back")
    assert back.message.startswith(f"tray {tray.hostname} is uncordoned: it is back in service")
