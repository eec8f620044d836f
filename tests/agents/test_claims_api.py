"""The agent API for DRA claims: `POST nodes/<id>/claims/` admits a claim on the tray,
`DELETE nodes/<id>/claims/<uid>/` lets go of it; a node token acts only for its node."""

from __future__ import annotations

import uuid

import jsonschema
import pytest
from rest_framework.test import APIClient

from agentwire.messages import CLAIM_ADMISSION_SCHEMA, CLAIM_REQUEST_SCHEMA
from domains.audit.models import Event
from domains.computedomains.models import DomainClaim
from testbed import factories
from tests.agents.test_agent_api import join, rack  # noqa: F401  (the fixture)
from tests.support.lifecycle import request_and_place

pytestmark = pytest.mark.django_db


def body(domain, namespace: str = "team-a", **claim: str) -> dict:
    doc = {
        "claim": {"uid": str(uuid.uuid4()), "namespace": namespace, "name": "w-0-channel", **claim},
        "domain_uid": str(domain.uid),
    }
    jsonschema.validate(doc, CLAIM_REQUEST_SCHEMA)  # what the agent sends is the contract
    return doc


@pytest.fixture
def placed(rack, ns_a, tenant_a):  # noqa: F811
    return request_and_place(ns_a, tenant_a, name="train", num_nodes=2)


def member_client(domain) -> tuple[APIClient, int]:
    node = domain.members.select_related("node").order_by("index").first().node
    return join(node)


def test_a_member_tray_admits_its_domains_claim_and_lets_go_of_it(placed):
    client, node_id = member_client(placed)
    doc = body(placed)
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", doc, format="json")
    assert resp.status_code == 200, resp.content
    jsonschema.validate(resp.json(), CLAIM_ADMISSION_SCHEMA)
    assert resp.json() == {
        "domain_uid": str(placed.uid),
        "domain_name": "team-a/train",
        "index": 0,
        "joined": False,
    }
    again = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", doc, format="json")
    assert again.status_code == 200  # the kubelet repeats prepares
    assert DomainClaim.objects.filter(released_at__isnull=True).count() == 1
    uid = doc["claim"]["uid"]
    assert client.delete(f"/api/v1/agent/nodes/{node_id}/claims/{uid}/").status_code == 204
    assert client.delete(f"/api/v1/agent/nodes/{node_id}/claims/{uid}/").status_code == 404
    verbs = list(Event.objects.filter(domain=placed).values_list("verb", flat=True))
    assert verbs.count("claim.prepared") == 1 and verbs.count("claim.unprepared") == 1


def test_a_claim_of_another_namespace_is_refused_and_nothing_recorded(placed):
    client, node_id = member_client(placed)
    resp = client.post(
        f"/api/v1/agent/nodes/{node_id}/claims/", body(placed, "team-b"), format="json"
    )
    assert resp.status_code == 404  # as if there were no such domain
    message = resp.json()["message"]
    assert "can only use a live domain of its own namespace" in message
    assert placed.name not in message and "team-a" not in message
    assert not DomainClaim.objects.exists()


def test_a_tray_that_is_not_a_member_of_a_placed_domain_is_refused(placed, rack):  # noqa: F811
    outsider = rack.nodes.exclude(memberships__domain=placed).first()
    client, node_id = join(outsider)
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", body(placed), format="json")
    assert resp.status_code == 409
    message = resp.json()["message"]
    assert f"tray {outsider.hostname} is not one of the trays placed" in message
    for member in placed.members.select_related("node"):
        assert member.node.hostname not in message  # the domain's trays are not an agent's
    assert not DomainClaim.objects.exists()


def test_an_unknown_domain_and_bad_input_are_named(placed):
    client, node_id = member_client(placed)
    doc = body(placed) | {"domain_uid": str(uuid.uuid4())}
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", doc, format="json")
    assert resp.status_code == 404 and "has no live ComputeDomain" in resp.json()["message"]
    bad = body(placed)
    bad["claim"]["namespace"] = "Not_A_Namespace"
    resp = client.post(f"/api/v1/agent/nodes/{node_id}/claims/", bad, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "claim.namespace"


def test_a_node_token_cannot_admit_claims_for_another_tray(placed):
    mine, other = [m.node for m in placed.members.select_related("node").order_by("index")]
    client, _ = join(mine)
    resp = client.post(f"/api/v1/agent/nodes/{other.pk}/claims/", body(placed), format="json")
    assert resp.status_code == 403
    uid = uuid.uuid4()
    assert client.delete(f"/api/v1/agent/nodes/{other.pk}/claims/{uid}/").status_code == 403
    assert APIClient().post(f"/api/v1/agent/nodes/{other.pk}/claims/", {}).status_code == 401


# --- a domain that follows its workload ------------------------------------------------------


@pytest.fixture
def split(db):
    """One rack in two cliques of three trays (`3,3`)."""
    from domains.agents.models import JoinToken
    from domains.security import hash_token
    from testbed import factories
    from tests.agents.test_agent_api import JOIN

    (made,) = factories.make_racks("3,3", ip_prefix=factories.tray_ip_prefix(22))
    JoinToken.objects.create(name="tests", token_hash=hash_token(JOIN))
    return made


@pytest.fixture
def follow(split, ns_a, tenant_a, settings):
    """A domain that follows its workload, with unchecked joins allowed: these tests are
    about joining and leaving, without Kubernetes to check the claims against (the checked
    path runs against a real API server in tests/kube/test_claim_check.py)."""
    from domains.audit.events import Actor
    from domains.computedomains.services import domain_request
    from domains.computedomains.specs import DomainSpec

    settings.PORTAL = {**settings.PORTAL, "UNVERIFIED_JOINS": True}
    return domain_request(
        actor=Actor.for_user(tenant_a), namespace=ns_a, spec=DomainSpec(name="wl", num_nodes=0)
    )


def test_without_kubernetes_a_tray_joins_no_domain_on_its_word_alone(follow, split, settings):
    settings.PORTAL = {**settings.PORTAL, "UNVERIFIED_JOINS": False}
    tray = trays(split)[0]
    *_, refused = admit(tray, follow)
    assert refused.status_code == 409, refused.content
    assert (
        "may not join a domain that follows its workload on an unchecked claim"
        in (refused.json()["message"])
    )
    assert not follow.members.exists() and not DomainClaim.objects.exists()


def trays(split) -> list:
    return list(split.nodes.order_by("clique__clique_id", "slot"))


_joined: dict[int, tuple[APIClient, int]] = {}


def admit(node, domain, uid: str | None = None):
    """The tray's agent (joined once: a live agent keeps its token) admits a new claim."""
    if node.pk not in _joined or not type(node).objects.filter(pk=_joined[node.pk][1]).exists():
        _joined[node.pk] = join(node)
    client, node_id = _joined[node.pk]
    doc = body(domain)
    if uid:
        doc["claim"]["uid"] = uid
    return (
        client,
        node_id,
        doc,
        client.post(f"/api/v1/agent/nodes/{node_id}/claims/", doc, format="json"),
    )


def test_a_following_domain_waits_for_its_workload_then_trays_join_and_leave(follow, split):
    from domains.computedomains.models import ChannelAllocation, Phase

    assert follow.phase == Phase.ADMITTED and follow.reason == "WaitingForWorkload"
    a, b, c = trays(split)[:3]
    _, _, _, first = admit(a, follow)
    assert first.status_code == 200, first.content
    assert first.json()["joined"] and first.json()["index"] == 0
    follow.refresh_from_db()
    assert follow.phase == Phase.FORMING
    assert ChannelAllocation.objects.filter(domain=follow, released_at__isnull=True).count() == 1
    client_b, b_id, doc_b, second = admit(b, follow)
    assert second.json()["index"] == 1
    _, _, _, third = admit(c, follow)
    assert third.json()["index"] == 2
    # b's pod goes: b leaves, its index is free again; the others stay as they are
    uid = doc_b["claim"]["uid"]
    assert client_b.delete(f"/api/v1/agent/nodes/{b_id}/claims/{uid}/").status_code == 204
    assert sorted(follow.members.filter(active=True).values_list("index", flat=True)) == [0, 2]
    factories.stale_heartbeat(b)  # its agent joins afresh (a live one keeps its token)
    _, _, _, again = admit(b, follow)
    assert again.json() == again.json() | {"index": 1, "joined": True}
    verbs = list(Event.objects.filter(domain=follow).values_list("verb", flat=True))
    assert verbs.count("member.joined") == 4 and verbs.count("member.left") == 1


def test_the_last_tray_leaving_returns_the_domain_to_waiting(follow, split):
    from domains.computedomains.models import ChannelAllocation, Phase

    client, node_id, doc, _ = admit(trays(split)[0], follow)
    uid = doc["claim"]["uid"]
    assert client.delete(f"/api/v1/agent/nodes/{node_id}/claims/{uid}/").status_code == 204
    follow.refresh_from_db()
    assert follow.phase == Phase.ADMITTED and follow.reason == "WaitingForWorkload"
    assert not follow.members.filter(active=True).exists()
    assert not ChannelAllocation.objects.filter(domain=follow, released_at__isnull=True).exists()


def test_another_cliques_tray_starts_its_ensemble_a_cordoned_one_and_one_over_quota_are_refused(
    follow, split, ns_a, operator
):
    from domains.audit.events import Actor
    from domains.computedomains.models import ChannelAllocation
    from domains.inventory.services import node_cordon
    from domains.tenancy.models import Quota

    first, second, third, other_clique = trays(split)[:4]
    admit(first, follow)
    *_, resp = admit(other_clique, follow)
    assert resp.status_code == 200, resp.content
    assert follow.members.get(node=other_clique, active=True).index == 0  # its clique's first
    held = ChannelAllocation.objects.filter(domain=follow, released_at__isnull=True)
    assert sorted(held.values_list("clique_id", flat=True)) == sorted(
        [first.clique_id, other_clique.clique_id]
    )
    node_cordon(actor=Actor.for_user(operator), node=second)
    _, _, _, resp = admit(second, follow)
    assert resp.status_code == 409 and "is cordoned, not ready" in resp.json()["message"]
    Quota.objects.filter(namespace=ns_a).update(max_nodes_per_domain=2)
    _, _, _, resp = admit(third, follow)
    assert resp.status_code == 422 and "the most a domain may hold" in resp.json()["message"]
    assert follow.members.filter(active=True).count() == 2  # nothing joined, nothing half-made
    assert DomainClaim.objects.filter(released_at__isnull=True).count() == 2


def test_a_following_domain_is_never_in_the_placement_queue_or_its_forecast(follow):
    from django.utils import timezone

    from domains.computedomains.forecast import queue_forecast
    from domains.computedomains.selectors import queued_domains

    assert follow not in queued_domains()
    assert follow.pk not in queue_forecast(now=timezone.now())


def test_members_hear_of_a_burst_of_joins_once_it_is_over(follow, split):
    """While trays keep joining, the desired state says `settling` (a joining tray holds its
    daemon's first start, a member its SIGUSR1); the members are nudged once it is quiet."""
    import functools
    import time

    from django.core.cache import cache

    from domains.computedomains.selectors import PEERS_MAX_S, peers_key, peers_nudge_wait
    from domains.computedomains.tasks import nudge_peers

    a, b = trays(split)[:2]
    client, node_id, _, _ = admit(a, follow)
    admit(b, follow)
    clique = trays(split)[0].clique_id
    cache.add(peers_key(follow.pk, clique), 1, 60)  # what the join's receiver sets, after commit
    desired = client.get(f"/api/v1/agent/nodes/{node_id}/desired/").json()["domain"]
    assert desired["settling"] is True and desired["slots"] == 3
    now = time.time()
    wait = functools.partial(peers_nudge_wait, follow.pk, clique_id=clique)
    assert wait(first=now, now=now) > 0  # b joined just now
    assert wait(first=now - PEERS_MAX_S, now=now) == 0  # waited enough
    assert wait(first=now, now=now + 60) == 0  # quiet for a minute
    assert nudge_peers(follow.pk, first=now - PEERS_MAX_S, clique_id=clique) == 2  # both
    desired = client.get(f"/api/v1/agent/nodes/{node_id}/desired/").json()["domain"]
    assert "settling" not in desired


def test_at_the_deadline_a_tray_stuck_before_its_daemon_is_dropped_the_rest_form(follow, split):
    """A joiner whose IMEX daemon never becomes ready does not fail everyone: at the
    formation deadline it leaves, its claim's prepare is answered with what to do, and
    the others form the domain without it."""
    from datetime import timedelta

    from django.utils import timezone

    from domains.computedomains.models import Phase
    from domains.computedomains.reconcile import reconcile
    from domains.computedomains.selectors import desired_member
    from tests.support.lifecycle import report

    a, b, c = trays(split)[:3]
    admit(a, follow)
    admit(b, follow)
    client_c, c_id, doc_c, _ = admit(c, follow)
    follow.refresh_from_db()
    for good in (a, b):  # daemons READY, but #2 never answers them
        report(good, follow, "waiting_peers", daemon_state="READY", domain_state="DEGRADED")
    report(c, follow, "starting_daemon", daemon_state="INITIALIZING", message="nvidia-imex hangs")
    done = reconcile(now=timezone.now() + timedelta(minutes=10))
    assert done["deadline"] == 1
    follow.refresh_from_db()
    assert follow.phase == Phase.FORMING  # not Failed
    assert follow.formation_deadline > timezone.now()
    assert desired_member(c) is None  # its agent tears down
    assert sorted(follow.members.filter(active=True).values_list("index", flat=True)) == [0, 1]
    again = client_c.post(f"/api/v1/agent/nodes/{c_id}/claims/", doc_c, format="json")
    assert again.status_code == 409
    message = again.json()["message"]
    assert f"tray {c.hostname} was dropped from ComputeDomain team-a/wl" in message
    assert "agent said: nvidia-imex hangs" in message and "Delete this pod" in message
    assert not DomainClaim.objects.filter(node=c, released_at__isnull=True).exists()
    verbs = list(Event.objects.filter(domain=follow).values_list("verb", flat=True))
    assert verbs.count("member.dropped") == 1
    for good in (a, b):  # the peer list without #2: both UP
        report(good, follow, "ready", daemon_state="READY", domain_state="UP")
    follow.refresh_from_db()
    assert follow.phase == Phase.READY


def test_at_the_deadline_a_following_domain_with_no_one_to_blame_fails(follow, split):
    from datetime import timedelta

    from django.utils import timezone

    from domains.computedomains.models import Phase
    from domains.computedomains.reconcile import reconcile
    from tests.support.lifecycle import report

    a, b = trays(split)[:2]
    admit(a, follow)
    admit(b, follow)
    for tray in (a, b):  # both daemons READY, yet they never connect: whose fault?
        report(tray, follow, "waiting_peers", daemon_state="READY", domain_state="DEGRADED")
    assert reconcile(now=timezone.now() + timedelta(minutes=10))["deadline"] == 1
    follow.refresh_from_db()
    assert (follow.phase, follow.reason) == (Phase.FAILED, "FormationTimeout")
