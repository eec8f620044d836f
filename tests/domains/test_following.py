"""A domain that follows its workload keeps to the cliques its constraint allowed when it was
requested, forms one IMEX ensemble in each clique its pods land in, and its admission
refuses exactly the trays its ResourceSlices call not eligible: a tray of a clique it does
not keep to, one held by a domain (still being cleaned after a release) and one reserved
for maintenance, even when it would be the domain's first member."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from agentwire.messages import ClaimRef
from domains.agents.desired import desired_state_for
from domains.audit.events import Actor
from domains.computedomains.claims import claim_admit, claim_release
from domains.computedomains.models import ChannelAllocation, ComputeDomain, Phase
from domains.computedomains.services import domain_release
from domains.errors import Conflict
from domains.foresight.maintenance import maintenance_schedule
from domains.inventory.models import Clique, Node
from domains.kube.dra import device_selector
from nodeagent.dra.slices import scheduling
from testbed import factories
from tests.support.lifecycle import request_and_place, request_domain

pytestmark = pytest.mark.django_db


@pytest.fixture
def cliques(db) -> tuple[list[Node], list[Node]]:
    """One rack, two cliques of four trays, in slot order."""
    (rack,) = factories.make_racks("4,4", ip_prefix=factories.tray_ip_prefix(31))
    first, second = rack.cliques.order_by("clique_id")
    return (
        list(first.nodes.order_by("slot")),
        list(second.nodes.order_by("slot")),
    )


def claim(n: int = 0) -> ClaimRef:
    return ClaimRef(uid=str(uuid.uuid4()), namespace="team-a", name=f"wl-{n}-channel")


def follow(ns, user, name: str = "wl", **spec) -> ComputeDomain:
    return request_domain(ns, user, name, num_nodes=0, **spec)


def kept(domain: ComputeDomain) -> set[int]:
    return set(domain.cliques.values_list("pk", flat=True))


def test_it_keeps_every_clique_its_constraint_allows(cliques, ns_a, tenant_a):
    first, second = cliques
    # Even with two of the first clique's trays taken, it keeps both cliques.
    placed = request_and_place(ns_a, tenant_a, name="placed", num_nodes=2)
    assert {m.node.clique_id for m in placed.members.select_related("node")} == {first[0].clique_id}
    domain = follow(ns_a, tenant_a)
    assert kept(domain) == {first[0].clique_id, second[0].clique_id}
    labels = sorted(c.label for c in Clique.objects.filter(pk__in=kept(domain)))
    assert device_selector(domain).endswith(f'.clique in ["{labels[0]}", "{labels[1]}"])')
    # A placed domain keeps to no clique of its own: its trays say where it is.
    assert not kept(placed) and "clique" not in device_selector(placed)


def test_its_placement_constraint_decides_the_cliques(cliques, ns_a, tenant_a):
    first, second = cliques
    target = Clique.objects.get(pk=first[0].clique_id)
    domain = follow(ns_a, tenant_a, placement_constraint="clique", placement_target=target.label)
    assert kept(domain) == {target.pk}
    assert device_selector(domain).endswith(f'.clique in ["{target.label}"])')
    # A rack: that rack's cliques, not another rack's.
    factories.make_racks("4", ip_prefix=factories.tray_ip_prefix(32), first_rack=2)
    rack = target.rack
    whole = follow(
        ns_a, tenant_a, "wl-rack", placement_constraint="rack", placement_target=rack.name
    )
    assert kept(whole) == {first[0].clique_id, second[0].clique_id}
    assert len(kept(follow(ns_a, tenant_a, "wl-any"))) == 3


def test_even_its_first_member_must_be_in_one_of_its_cliques(cliques, ns_a, tenant_a):
    first, second = cliques
    label = Clique.objects.get(pk=first[0].clique_id).label
    domain = follow(ns_a, tenant_a, placement_constraint="clique", placement_target=label)
    with pytest.raises(Conflict, match=f"does not keep to \\(its cliques: {label},"):
        claim_admit(node=second[0], claim=claim(), domain_uid=str(domain.uid))
    assert not domain.members.exists() and not domain.claims.exists()
    admitted = claim_admit(node=first[0], claim=claim(1), domain_uid=str(domain.uid))
    assert admitted.joined and admitted.member.index == 0


def ensemble(tray) -> tuple:
    """What a member's daemon is started with: its index, peers, slots and channels."""
    want = (tray if isinstance(tray, dict) else desired_state_for(tray))["domain"]
    assert want is not None
    return want["index"], want["peers"], want.get("slots"), want["channels"]


def test_a_claim_in_a_second_clique_creates_its_ensemble(cliques, ns_a, tenant_a):
    """The first tray of a clique is index 0 there, with a channel from that clique's
    ledger; joins take the lowest free index of their clique; the last to leave a clique
    releases its channel, and the other clique's members and desired states stay as they
    were."""
    first, second = cliques
    domain = follow(ns_a, tenant_a)
    refs = {t.hostname: claim(i) for i, t in enumerate([*first[:2], *second[:2]])}

    def admit(tray: Node):
        return claim_admit(node=tray, claim=refs[tray.hostname], domain_uid=str(domain.uid))

    assert [admit(t).member.index for t in (first[0], first[1])] == [0, 1]
    before = desired_state_for(first[0])
    joined = admit(second[0])
    assert joined.joined and joined.member.index == 0
    assert joined.member.clique_id == second[0].clique_id
    assert admit(second[1]).member.index == 1
    channels = dict(
        ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True).values_list(
            "clique_id", "channel"
        )
    )
    assert set(channels) == {first[0].clique_id, second[0].clique_id}
    theirs = desired_state_for(second[0])["domain"]
    assert theirs["channels"] == {"mode": "Single", "numbers": [channels[second[0].clique_id]]}
    assert {p["index"] for p in theirs["peers"]} == {0, 1}
    assert {p["hostname"] for p in theirs["peers"]} >= {second[0].hostname, second[1].hostname}
    # The first clique's nodes files and channel do not change: its peers are its own.
    assert ensemble(first[0]) == ensemble(before)
    # Leaving: index 0 of the second clique goes, the next join there takes it again.
    claim_release(node=second[0], claim_uid=refs[second[0].hostname]["uid"])
    refs[second[2].hostname] = claim(9)
    assert admit(second[2]).member.index == 0
    for tray in (second[1], second[2]):
        claim_release(node=tray, claim_uid=refs[tray.hostname]["uid"])
    # The second clique's ensemble is gone: its channel released, the first's kept.
    live = ChannelAllocation.objects.filter(domain=domain, released_at__isnull=True)
    assert list(live.values_list("clique_id", "channel")) == [
        (first[0].clique_id, channels[first[0].clique_id])
    ]
    assert ensemble(first[0]) == ensemble(before)
    assert not domain.members.filter(active=True, clique_id=second[0].clique_id).exists()
    assert desired_state_for(second[0])["domain"] is None


def test_it_refuses_the_trays_its_slices_call_not_eligible(cliques, ns_a, tenant_a, operator):
    first, _ = cliques
    # A placed domain on two trays, released: they stay held until their agents confirm
    # a clean tray.
    placed = request_and_place(ns_a, tenant_a, name="placed", num_nodes=2)
    held = [m.node for m in placed.members.select_related("node").order_by("index")]
    domain_release(actor=Actor.for_user(tenant_a), domain=placed)
    placed.refresh_from_db()
    assert placed.phase == Phase.RELEASING
    assert {t.clique_id for t in held} == {first[0].clique_id}
    label = Clique.objects.get(pk=first[0].clique_id).label
    domain = follow(ns_a, tenant_a, placement_constraint="clique", placement_target=label)
    free = [t for t in first if t not in held]
    now = timezone.now()
    maintenance_schedule(
        actor=Actor.for_user(operator), starts_at=now + timedelta(days=7),
        ends_at=now + timedelta(days=7, hours=4), reason="firmware", trays=[free[0].hostname],
    )  # fmt: skip
    refusals = {
        held[0].hostname: "still being cleaned after one",
        free[0].hostname: "is reserved for maintenance",
    }
    for tray in (held[0], free[0]):
        tray.refresh_from_db()
        serving, eligible = scheduling(desired_state_for(tray))
        assert (serving, eligible) == ("", False)  # what its slice says
        with pytest.raises(Conflict, match=refusals[tray.hostname]):
            claim_admit(node=tray, claim=claim(), domain_uid=str(domain.uid))
    assert not domain.members.exists()
    # The tray its slice calls eligible is taken.
    assert scheduling(desired_state_for(free[1])) == ("", True)
    assert claim_admit(node=free[1], claim=claim(), domain_uid=str(domain.uid)).joined


@pytest.mark.parametrize("num_nodes", [0, 1])
def test_a_tray_in_no_clique_is_admitted_without_a_channel_as_nvidias_driver_does(
    cliques, ns_a, tenant_a, num_nodes
):
    """A GPU node that is not fabric-attached (a PCIe card, an all-zero cluster uuid): NVIDIA's
    driver prepares a ComputeDomain claim there without an IMEX channel. The tray joins no
    IMEX domain and takes no quota; its claim is recorded and let go of as any other."""
    first, _ = cliques
    plain = first[3]
    Node.objects.filter(pk=plain.pk).update(clique=None)
    plain.refresh_from_db()
    domain = (
        follow(ns_a, tenant_a)
        if num_nodes == 0
        else request_and_place(ns_a, tenant_a, name="placed", num_nodes=1)
    )
    ref = claim()
    admitted = claim_admit(node=plain, claim=ref, domain_uid=str(domain.uid))
    assert admitted.member is None and not admitted.joined
    assert not domain.members.filter(node=plain).exists()
    again = claim_admit(node=plain, claim=ref, domain_uid=str(domain.uid))  # idempotent
    assert again.member is None
    held = domain.claims.get(claim_uid=ref["uid"], released_at__isnull=True)
    assert held.node_id == plain.pk
    claim_release(node=plain, claim_uid=ref["uid"])
    assert not domain.claims.filter(released_at__isnull=True).exists()
    domain.refresh_from_db()
    assert domain.phase in (Phase.ADMITTED, Phase.FORMING, Phase.READY)


def test_a_tray_without_a_clique_that_may_get_one_is_not_admitted_without_a_channel(
    cliques, ns_a, tenant_a
):
    """No clique *yet*: its fabric registration unfinished (a blocking condition). Prepared
    without a channel, its pod would run for good without one: it waits instead."""
    first, _ = cliques
    waiting = first[3]
    Node.objects.filter(pk=waiting.pk).update(clique=None)
    waiting.refresh_from_db()
    waiting.conditions.create(
        type="FabricNotReady", blocking=True, message="IN_PROGRESS", since=timezone.now()
    )
    domain = follow(ns_a, tenant_a)
    with pytest.raises(Conflict, match=r"has no NVLink clique or management IP yet"):
        claim_admit(node=waiting, claim=claim(), domain_uid=str(domain.uid))
    assert not domain.claims.exists()


def test_each_domain_that_follows_its_workload_has_peer_names_of_its_own(cliques, ns_a, tenant_a):
    """IMEX takes daemons whose nodes files list the same names for one domain: the names
    carry the domain's token, so a tray that moved to another domain is never taken for a
    peer by a daemon of its old one."""
    first, _ = cliques
    one, two = follow(ns_a, tenant_a, "wl-a"), follow(ns_a, tenant_a, "wl-b")
    assert one.imex_name_token and one.imex_name_token != two.imex_name_token
    assert one.imex_name_token == one.uid.hex[:10]
    claim_admit(node=first[0], claim=claim(), domain_uid=str(one.uid))
    want = desired_state_for(first[0])["domain"]
    assert want is not None and want["names"] == one.imex_name_token
    # A domain from before names carried a token: none in its desired state.
    ComputeDomain.objects.filter(pk=one.pk).update(imex_name_token="")
    assert "names" not in (desired_state_for(first[0])["domain"] or {})


def test_a_burst_of_joins_in_one_clique_holds_and_nudges_only_that_clique(
    cliques, ns_a, tenant_a, django_capture_on_commit_callbacks
):
    """Each clique's ensemble has its own bursts: the trays of the other clique are neither
    told to settle nor nudged to re-fetch their peers."""
    from django.core.cache import cache

    from domains.computedomains.selectors import peers_key
    from domains.computedomains.tasks import nudge_peers

    first, second = cliques
    domain = follow(ns_a, tenant_a)
    for tray in (first[0], first[1], second[0], second[1]):
        claim_admit(node=tray, claim=claim(), domain_uid=str(domain.uid))
    cache.delete_many([peers_key(domain.pk, t.clique_id) for t in (first[0], second[0])])
    with django_capture_on_commit_callbacks(execute=True):  # the join's receivers run
        claim_admit(node=second[2], claim=claim(), domain_uid=str(domain.uid))
    assert cache.get(peers_key(domain.pk, second[0].clique_id))
    assert not cache.get(peers_key(domain.pk, first[0].clique_id))
    assert desired_state_for(second[0])["domain"]["settling"] is True
    assert "settling" not in desired_state_for(first[0])["domain"]
    told = nudge_peers(domain.pk, first=1.0, clique_id=second[0].clique_id)  # long ago
    assert told == 3  # the second clique's three members, none of the first's
    assert not cache.get(peers_key(domain.pk, second[0].clique_id))
