"""The desired state is read in one statement (domains/agents/desired.py): the same document
the lifecycle's selectors describe, in every phase and mode, and on the agents' fast path
only for the tray whose node token asks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentwire.messages import ClaimRef
from domains.agents.desired import desired_state, desired_state_for
from domains.audit.events import Actor
from domains.computedomains.claims import claim_admit
from domains.computedomains.following import join_refusal
from domains.computedomains.models import AllocationMode, ComputeDomain
from domains.computedomains.selectors import (
    desired_member,
    domain_channels,
    domain_peer_addresses,
    member_should_run,
    peers_settling,
)
from domains.computedomains.services import domain_release
from domains.computedomains.specs import DomainSpec
from domains.inventory.models import MaintenanceWindow, Node, NodeCondition
from domains.security import generate_token, hash_token
from testbed import factories
from tests.support.lifecycle import request_and_place

pytestmark = pytest.mark.django_db


def as_the_selectors_say(node: Node) -> dict:
    """The document built from the lifecycle's selectors, model by model (the reference)."""
    doc: dict = {
        "node": {"id": node.pk, "hostname": node.hostname},
        "domain": None,
        "release": None,
        # What the claim path asks before a tray may become a member.
        "eligible": join_refusal(node) == "",
    }
    member = desired_member(node)
    if member is None:
        return doc
    domain = member.domain
    if not member_should_run(member):
        doc["release"] = {"uid": str(domain.uid), "request_id": domain.request_id}
        return doc
    numbers = domain_channels(domain, clique_id=member.clique_id)
    if domain.allocation_mode == AllocationMode.ALL and numbers:
        channels: dict = {"mode": "All", "first": min(numbers), "last": max(numbers)}
    else:
        channels = {"mode": "Single", "numbers": sorted(numbers)}
    doc["domain"] = {
        "uid": str(domain.uid),
        "name": f"{domain.namespace.name}/{domain.name}",
        "generation": domain.generation,
        "request_id": domain.request_id,
        "index": member.index,
        "peers": [
            {"index": i, "ip": ip, "hostname": host}
            for i, ip, host in domain_peer_addresses(domain, clique_id=member.clique_id)
        ],
        "imex": {
            "server_port": settings.PORTAL["IMEX_SERVER_PORT"],
            "cmd_port": settings.PORTAL["IMEX_CMD_PORT"],
        },
        "channels": channels,
    }
    if domain.follows_workload:
        slots = Node.objects.filter(clique_id=member.clique_id).count()
        doc["domain"]["slots"] = max(slots, member.index + 1)
        if domain.imex_name_token:
            doc["domain"]["names"] = domain.imex_name_token
        if peers_settling(domain.pk, member.clique_id):
            doc["domain"]["settling"] = True
    return doc


def read(node: Node) -> dict:
    with CaptureQueriesContext(connection) as queries:
        doc = desired_state_for(node)
    assert len(queries) == 1
    return dict(doc)


@pytest.fixture
def trays(db) -> list[Node]:
    (rack,) = factories.make_racks("4", ip_prefix=factories.tray_ip_prefix(23))
    return list(rack.nodes.order_by("slot"))


@pytest.mark.parametrize("mode", [AllocationMode.SINGLE, AllocationMode.ALL])
def test_one_statement_reads_what_the_selectors_say_in_every_phase(trays, ns_a, tenant_a, mode):
    assert read(trays[0]) == as_the_selectors_say(trays[0])  # idle
    domain = request_and_place(ns_a, tenant_a, name="d", num_nodes=3, allocation_mode=mode)
    for tray in trays:  # three members, and one tray outside the domain
        assert read(tray) == as_the_selectors_say(tray)
    member = domain.members.order_by("index").last().node
    forming = read(member)["domain"]
    assert forming["index"] == 2 and [p["index"] for p in forming["peers"]] == [0, 1, 2]
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    releasing = read(member)
    assert releasing == as_the_selectors_say(member)
    assert releasing["release"]["uid"] == str(domain.uid) and releasing["domain"] is None


def test_a_domain_that_follows_its_workload_names_its_slots(db, ns_a, tenant_a):
    from domains.computedomains.services import domain_request

    (rack,) = factories.make_racks("3,3", ip_prefix=factories.tray_ip_prefix(24))
    first, second = list(rack.nodes.order_by("clique__clique_id", "slot"))[:2]
    domain: ComputeDomain = domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="wl", num_nodes=0)
    )
    for i, tray in enumerate((first, second)):
        for node in (first, second):
            node.refresh_from_db()
        claim = ClaimRef(
            uid=f"00000000-0000-4000-8000-00000000000{i}", namespace="team-a", name="c"
        )
        claim_admit(node=tray, claim=claim, domain_uid=str(domain.uid))
    doc = read(second)
    assert doc == as_the_selectors_say(second)
    assert doc["domain"]["slots"] == 3 and len(doc["domain"]["peers"]) == 2


def test_on_the_fast_path_only_the_trays_own_token_reads_it(trays, ns_a, tenant_a):
    request_and_place(ns_a, tenant_a, name="d", num_nodes=2)
    tokens = {}
    for tray in trays[:2]:
        tokens[tray.pk] = generate_token("dpn")
        Node.objects.filter(pk=tray.pk).update(agent_token_hash=hash_token(tokens[tray.pk]))
    mine, other = trays[0], trays[1]
    doc = desired_state(mine.pk, token=tokens[mine.pk])
    assert doc is not None and doc == as_the_selectors_say(mine)
    assert desired_state(mine.pk, token=tokens[other.pk]) is None  # another tray's token
    assert desired_state(mine.pk, token="dpn_unknown") is None
    assert desired_state(mine.pk, token="") is None
    Node.objects.filter(pk=mine.pk).update(gone=True)
    assert desired_state(mine.pk, token=tokens[mine.pk]) is None  # a gone tray's token


@pytest.mark.parametrize("what", ["cordoned", "draining", "down", "pending", "blocked", "no ip"])
def test_a_tray_a_claim_could_not_join_is_not_eligible(trays, what):
    tray = trays[0]
    assert read(tray)["eligible"] is True
    if what == "blocked":
        NodeCondition.objects.create(
            node=tray, type="FabricNotReady", message="IN_PROGRESS", since=timezone.now()
        )
    elif what == "no ip":
        Node.objects.filter(pk=tray.pk).update(management_ip=None)
    else:
        Node.objects.filter(pk=tray.pk).update(state=what)
    tray.refresh_from_db()
    doc = read(tray)
    assert doc["eligible"] is False
    assert doc == as_the_selectors_say(tray)


def test_a_tray_held_by_a_domain_or_reserved_for_maintenance_is_not_eligible(
    trays, ns_a, tenant_a, operator
):
    from domains.foresight.maintenance import maintenance_cancel, maintenance_schedule

    free, member = trays[0], trays[1]
    # Reserved for maintenance: a window scheduled on it and not over, however far off.
    now = timezone.now()
    window = maintenance_schedule(
        actor=Actor.for_user(operator), starts_at=now + timedelta(days=3),
        ends_at=now + timedelta(days=3, hours=2), reason="PSU swap", trays=[free.hostname],
    )  # fmt: skip
    doc = read(free)
    assert doc["eligible"] is False and doc == as_the_selectors_say(free)
    maintenance_cancel(actor=Actor.for_user(operator), window=window)
    assert read(free)["eligible"] is True
    MaintenanceWindow.objects.filter(pk=window.pk).update(  # one that is over
        cancelled_at=None, starts_at=now - timedelta(hours=3), ends_at=now - timedelta(hours=1)
    )
    assert read(free)["eligible"] is True

    # Held: a member while its domain runs, and after its release until its agent confirmed
    # a clean tray (its desired state names no domain then: only the release).
    domain = request_and_place(ns_a, tenant_a, name="d", num_nodes=2)
    member = domain.members.order_by("index").first().node
    assert read(member)["eligible"] is False
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    releasing = read(member)
    assert releasing["domain"] is None and releasing["release"] is not None
    assert releasing["eligible"] is False and releasing == as_the_selectors_say(member)
