"""A placed domain over several NVLink cliques: one IMEX ensemble per clique inside one
ComputeDomain. Placed from `plan()` with indexes counted per clique and one channel from
each clique's ledger; each tray's desired state lists only its own clique's members; Ready
when every clique is, Degraded naming the clique at fault; a lost tray is replaced from its
own clique; release gives every clique's channel back."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
import yaml
from django.utils import timezone
from rest_framework.test import APIClient

from agentwire.messages import Step
from domains.agents.desired import desired_state
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.failover import domains_replace_lost
from domains.computedomains.models import ChannelAllocation, DomainMember, Phase
from domains.computedomains.reconcile import reconcile
from domains.computedomains.services import domain_dry_run, domain_release
from domains.computedomains.specs import DomainSpec
from domains.computedomains.trays import tray_act
from domains.errors import InvalidInput
from domains.inventory.models import Clique, Node
from domains.kube.manifests import workload_manifests
from testbed import factories
from tests.support.lifecycle import all_clean, all_ready, report, request_and_place

pytestmark = pytest.mark.django_db


@pytest.fixture
def ns_a(tenant_a):
    """tenant_a's namespace, with room for a domain of two racks."""
    namespace = factories.make_namespace("team-big")
    factories.add_member(tenant_a, namespace, "member")
    return namespace


def ensembles(domain) -> dict[str, list[tuple[int, str]]]:
    """{clique name: [(index, hostname), …]} of the domain's active members."""
    found: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for name, index, host in (
        DomainMember.objects.filter(domain=domain, active=True)
        .order_by("clique__name", "index")
        .values_list("clique__name", "index", "node__hostname")
    ):
        found[name].append((index, host))
    return dict(found)


def channels(domain, *, open_only: bool = True) -> dict[str, int]:
    rows = ChannelAllocation.objects.filter(domain=domain)
    if open_only:
        rows = rows.filter(released_at__isnull=True)
    return dict(rows.values_list("clique__name", "channel"))


def test_a_domain_larger_than_a_clique_is_placed_over_two_with_indexes_per_clique(
    two_racks, ns_a, tenant_a
):
    domain = request_and_place(ns_a, tenant_a, num_nodes=27)
    assert domain.phase == Phase.FORMING
    found = ensembles(domain)
    assert sorted(len(m) for m in found.values()) == [9, 18]
    for members in found.values():
        assert [index for index, _ in members] == list(range(len(members)))
        assert len({host.split("-t")[0] for _, host in members}) == 1  # one rack each
    assert sorted(channels(domain)) == sorted(found)  # one channel in each clique's ledger
    placed = Event.objects.get(domain=domain, verb="domain.placed")
    assert placed.message.startswith("placed on 27 trays in 2 cliques over 2 racks")
    assert sorted(c["trays"] for c in placed.details["cliques"]) == [9, 18]


def test_each_trays_desired_state_lists_only_its_own_cliques_members(two_racks, ns_a, tenant_a):
    other = request_and_place(ns_a, tenant_a, name="first", num_nodes=2)  # takes channel 1
    domain = request_and_place(ns_a, tenant_a, num_nodes=27)
    by_clique = {name: {host for _, host in members} for name, members in ensembles(domain).items()}
    held = channels(domain)
    for member in DomainMember.objects.filter(domain=domain).select_related("node", "clique"):
        want = desired_state(member.node_id)["domain"]
        assert want["index"] == member.index
        assert {p["hostname"] for p in want["peers"]} == by_clique[member.clique.name]
        assert [p["index"] for p in want["peers"]] == list(range(len(want["peers"])))
        assert want["channels"] == {"mode": "Single", "numbers": [held[member.clique.name]]}
    # The clique that also holds the first domain gave its next free channel.
    first_clique = DomainMember.objects.filter(domain=other).first().clique.name
    assert held[first_clique] == 2


def test_racks_asked_for_get_an_even_share(two_racks, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=4, span_racks=2)
    assert sorted(len(m) for m in ensembles(domain).values()) == [2, 2]
    assert domain.span_racks == 2


def test_a_domain_that_fits_one_clique_stays_in_one(two_racks, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=18)
    assert [len(m) for m in ensembles(domain).values()] == [18]
    assert len(channels(domain)) == 1


def test_ready_needs_every_clique_and_a_failure_names_its_clique(two_racks, ns_a, tenant_a):
    domain = all_ready(request_and_place(ns_a, tenant_a, num_nodes=27))
    assert (domain.phase, domain.message) == (Phase.READY, "all 27 members ready, in 2 cliques")
    victim = DomainMember.objects.select_related("node", "clique__rack").filter(
        domain=domain, index=3
    )[1]
    report(victim.node, domain, Step.FAILED, error="nvidia-imex exited with status 1")
    domain.refresh_from_db()
    clique = victim.clique
    assert domain.phase == Phase.DEGRADED
    assert domain.message == (
        f"clique {clique.name} (rack {clique.rack.name}): {victim.node.hostname} failed: "
        "nvidia-imex exited with status 1 (step failed); the other clique is up"
    )


def test_a_forming_domain_over_two_cliques_names_the_clique_it_waits_for(two_racks, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=27)
    members = list(DomainMember.objects.filter(domain=domain).select_related("node", "clique"))
    ready = [m for m in members if m.clique.name != "gb-r02-c0"]
    for member in ready:
        report(member.node, domain, Step.READY)
    domain.refresh_from_db()
    assert (domain.phase, domain.message) == (
        Phase.FORMING,
        f"{len(ready)} of 27 members ready; waiting for clique gb-r02-c0 (rack gb-r02)",
    )


def test_the_formation_deadline_names_the_clique_that_did_not_form(two_racks, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a, num_nodes=27)
    for member in DomainMember.objects.filter(domain=domain).select_related("node"):
        if member.clique.name != "gb-r02-c0":
            report(member.node, domain, Step.READY)
    reconcile(now=timezone.now() + timedelta(minutes=10))
    domain.refresh_from_db()
    stuck = DomainMember.objects.get(domain=domain, clique__name="gb-r02-c0", index=0)
    assert domain.phase == Phase.FAILED
    assert domain.message.startswith(
        f"formation deadline passed: clique gb-r02-c0 (rack gb-r02): {stuck.node.hostname} (#0)"
    )


def test_a_lost_tray_is_replaced_from_its_own_clique(two_racks, ns_a, tenant_a, operator):
    domain = all_ready(request_and_place(ns_a, tenant_a, num_nodes=27))
    # The 9-tray part's clique has free trays; the whole clique has none.
    part = min(ensembles(domain).items(), key=lambda item: len(item[1]))[0]
    lost = DomainMember.objects.select_related("node").get(
        domain=domain, clique__name=part, index=4, active=True
    )
    actor = Actor.for_user(operator)
    tray_act(actor=actor, node=lost.node, action="drain")
    tray_act(actor=actor, node=lost.node, action="mark_down", reason="PSU fault")
    assert domains_replace_lost() == 1
    new = DomainMember.objects.get(domain=domain, clique__name=part, index=4, active=True)
    assert new.node_id != lost.node_id
    assert Node.objects.get(pk=new.node_id).clique.name == part


def test_release_tears_down_every_clique_and_gives_each_channel_back(two_racks, ns_a, tenant_a):
    domain = all_ready(request_and_place(ns_a, tenant_a, num_nodes=27))
    held = channels(domain)
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    for member in DomainMember.objects.filter(domain=domain).select_related("node"):
        assert desired_state(member.node_id)["release"] == {
            "uid": str(domain.uid),
            "request_id": domain.request_id,
        }
    all_clean(domain)
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASED
    assert channels(domain) == {} and channels(domain, open_only=False) == held
    assert not DomainMember.objects.filter(domain=domain, active=True).exists()


def test_the_dry_run_says_which_cliques(two_racks, ns_a, tenant_a):
    verdict = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="x", num_nodes=27))
    assert verdict.placeable and verdict.message.startswith("would be placed on 27 trays in 2")
    assert verdict.reasons[0].startswith("27 trays span 2 cliques")
    assert len(verdict.nodes) == 27 and verdict.clique == ""


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"num_nodes": 37}, "num_nodes", "between 1 and 36 (the trays of every clique"),
        ({"num_nodes": 4, "span_racks": 3}, "span_racks", "at most 2"),
        ({"num_nodes": 4, "span_cliques": 2, "span_racks": 2}, "span_cliques", "not both"),
        ({"num_nodes": 0, "span_cliques": 2}, "span_cliques", "only a placed domain"),
        ({"num_nodes": 4, "span_cliques": -1}, "span_cliques", "must be 0"),
    ],
)
def test_a_span_that_cannot_be_is_refused_naming_the_field(
    two_racks, ns_a, tenant_a, spec, field, words
):
    with pytest.raises(InvalidInput) as refused:
        request_and_place(ns_a, tenant_a, **spec)
    assert refused.value.field == field and words in str(refused.value)
    assert not Clique.objects.filter(channels__isnull=False).exists()


def test_the_workload_manifests_pin_each_pod_to_a_placed_tray_of_any_of_its_cliques(
    two_racks, ns_a, tenant_a
):
    domain = request_and_place(ns_a, tenant_a, num_nodes=27)
    hosts = sorted(host for members in ensembles(domain).values() for _, host in members)
    for kind, text in workload_manifests(domain).items():
        assert "27 pod(s), one per placed tray, over 2 NVLink cliques" in text, kind
        doc = yaml.safe_load(text)
        spec = doc["spec"]["mpiReplicaSpecs"]["Worker"] if kind == "mpijob" else doc["spec"]
        affinity = spec["template"]["spec"]["affinity"]
        assert "podAffinity" not in affinity  # no one-clique rule: its pods are in two
        ((expression,),) = [
            term["matchExpressions"]
            for term in affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ]
        ]
        assert expression["key"] == "kubernetes.io/hostname"
        assert sorted(expression["values"]) == hosts


def test_a_queued_domain_over_two_cliques_is_estimated_not_never_fits(two_racks, ns_a, tenant_a):
    first = request_and_place(ns_a, tenant_a, name="first", num_nodes=18)
    assert first.phase == Phase.FORMING
    verdict = domain_dry_run(namespace=ns_a, spec=DomainSpec(name="big", num_nodes=27))
    # 18 of 36 trays are held (for a day): 27 fit over two cliques once the lease ends.
    assert not verdict.placeable
    assert verdict.estimate_reason == "Estimated", verdict.estimate_message


def test_the_api_status_lists_each_clique_with_its_rack_members_and_channel(
    two_racks, ns_a, tenant_a
):
    domain = all_ready(request_and_place(ns_a, tenant_a, num_nodes=27))
    api = APIClient()
    api.force_authenticate(tenant_a)
    status = api.get(f"/api/v1/namespaces/{ns_a.name}/computedomains/train/").json()["status"]
    held = channels(domain)
    by_name = sorted(status["cliques"], key=lambda c: c["cliqueName"])
    assert by_name == [
        {
            "cliqueID": clique.label,
            "cliqueName": clique.name,
            "rack": clique.rack.name,
            "members": len(ensembles(domain)[clique.name]),
            "ready": len(ensembles(domain)[clique.name]),
            "channel": held[clique.name],
        }
        for clique in Clique.objects.filter(
            pk__in=[m.clique_id for m in domain.members.filter(index=0)]
        ).order_by("name")
    ]
    assert sorted(c["members"] for c in status["cliques"]) == [9, 18]
    # The nodes list says each tray's clique and its index inside it.
    assert {(n["cliqueID"], n["index"]) for n in status["nodes"]} == {
        (c["cliqueID"], i) for c in status["cliques"] for i in range(c["members"])
    }
