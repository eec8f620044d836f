"""Pages render what they promise, forms show the services' errors on the right field, and
query counts stay constant in the number of racks."""

from __future__ import annotations

import csv
import io

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain
from domains.computedomains.selectors import channel_ledger
from domains.computedomains.services import domain_release
from domains.inventory.models import Clique, Gpu, Node, NodeState, Rack
from domains.inventory.services import node_cordon
from domains.tenancy.models import Quota
from testbed import factories
from tests.support.lifecycle import all_clean, form, request_domain

pytestmark = pytest.mark.django_db


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_the_fabric_overview_costs_the_same_queries_for_one_rack_and_three(
    client, operator, tenant_a, ns_a
):
    factories.make_racks("18", ip_prefix="127.13")
    form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    client.force_login(operator)
    url = reverse("operator:fabric")
    one = _queries(client, url)
    factories.make_racks("18", "9,9", ip_prefix="127.13", first_rack=2)
    form(request_domain(ns_a, tenant_a, "two", num_nodes=3))
    three = _queries(client, url)
    assert one == three
    page = client.get(url).content.decode()
    assert page.count('<svg class="el"') == 3


def test_the_tenant_request_preview_costs_the_same_queries_for_one_rack_and_three(
    client, tenant_a, ns_a
):
    factories.make_racks("18", ip_prefix="127.13")
    client.force_login(tenant_a)
    url = reverse("tenant:preview", args=["team-a"])
    data = {"name": "x", "num_nodes": 2, "allocation_mode": "Single",
            "placement_constraint": "any"}  # fmt: skip

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.post(url, data).status_code == 200
        return len(ctx.captured_queries)

    one = count()
    factories.make_racks("18", "18", ip_prefix="127.13", first_rack=2)
    assert count() == one


def test_the_domain_list_query_count_does_not_grow_with_domains(client, operator, tenant_a, ns_a):
    factories.make_racks("18", ip_prefix="127.13")
    request_domain(ns_a, tenant_a, "a", num_nodes=1)
    client.force_login(operator)
    url = reverse("operator:domains")
    one = _queries(client, url)
    for name in ("b", "c", "d"):
        request_domain(ns_a, tenant_a, name, num_nodes=1)
    assert _queries(client, url) == one


def test_the_rack_drawing_shows_state_in_words_and_patterns_not_only_colour(
    client, operator, topology, ready_domain
):
    trays = list(topology.nodes.order_by("slot"))
    Node.objects.filter(pk=trays[5].pk).update(state=NodeState.CORDONED)
    Node.objects.filter(pk=trays[6].pk).update(state=NodeState.DOWN)
    Gpu.objects.filter(node=trays[7], index=2).update(health="failed")
    client.force_login(operator)
    svg = client.get(reverse("operator:rack", args=[topology.name])).content.decode()
    assert 'fill="url(#el-cordoned)"' in svg and ">cordoned</text>" in svg
    assert 'fill="url(#el-down)"' in svg and ">down</text>" in svg
    assert "team-a/train" in svg  # operators see the domain by name
    assert "GPU2 failed" in svg  # the hover card names the failed GPU
    assert 'class="cqb"' in svg  # the clique's bracket
    assert svg.count('class="pw">NVLink switch tray ') == 9


def test_tenants_see_other_namespaces_trays_only_as_anonymous_in_use(
    client, topology, ready_domain, tenant_b
):
    client.force_login(tenant_b)
    resp = client.post(
        reverse("tenant:preview", args=["team-b"]),
        {"name": "mine", "num_nodes": 2, "allocation_mode": "Single",
         "placement_constraint": "any"},
    )  # fmt: skip
    body = resp.content.decode()
    assert 'data-preview="ok"' in body
    assert "train" not in body and "team-a" not in body
    assert ">in use</text>" in body
    assert body.count(' highlight"') == 2  # where it would land


def test_the_preview_says_over_quota_and_names_the_limit(client, topology, tenant_b):
    client.force_login(tenant_b)
    resp = client.post(
        reverse("tenant:preview", args=["team-b"]),
        {"name": "big", "num_nodes": 8, "allocation_mode": "Single",
         "placement_constraint": "any"},
    )  # fmt: skip
    body = resp.content.decode()
    assert 'data-preview="over-quota"' in body
    assert "Over quota" in body


def test_the_preview_reports_invalid_input_without_a_dry_run(client, topology, tenant_a):
    client.force_login(tenant_a)
    resp = client.post(reverse("tenant:preview", args=["team-a"]), {"name": "Bad_Name"})
    assert 'data-preview="invalid"' in resp.content.decode()


def test_a_request_over_quota_shows_the_message_and_creates_nothing(client, topology, tenant_b):
    client.force_login(tenant_b)
    resp = client.post(
        reverse("tenant:request", args=["team-b"]),
        {"name": "big", "num_nodes": 8, "allocation_mode": "Single",
         "placement_constraint": "any"},
    )  # fmt: skip
    assert resp.status_code == 200
    assert "over the quota of namespace team-b" in resp.content.decode()
    assert not ComputeDomain.objects.filter(name="big").exists()


def test_a_bad_name_is_reported_on_the_name_field(client, topology, tenant_a):
    client.force_login(tenant_a)
    resp = client.post(
        reverse("tenant:request", args=["team-a"]),
        {"name": "-bad-", "num_nodes": 1, "allocation_mode": "Single",
         "placement_constraint": "any"},
    )  # fmt: skip
    assert resp.status_code == 200
    assert resp.context["form"].errors.get("name")
    assert not ComputeDomain.objects.exists()


def test_a_good_request_redirects_to_the_new_domain(client, topology, tenant_a):
    client.force_login(tenant_a)
    resp = client.post(
        reverse("tenant:request", args=["team-a"]),
        {"name": "good", "num_nodes": 2, "allocation_mode": "Single",
         "placement_constraint": "any", "lifetime_hours": 2},
    )  # fmt: skip
    domain = ComputeDomain.objects.get(name="good")
    assert resp["Location"] == reverse("tenant:domain", args=["team-a", domain.uid])
    assert domain.requested_by == tenant_a


def test_the_domain_page_shows_timeline_matrix_channels_and_manifests(
    client, tenant_a, ready_domain
):
    client.force_login(tenant_a)
    url = reverse("tenant:domain", args=["team-a", ready_domain.uid])
    body = client.get(url).content.decode()
    assert 'data-phase="Ready"' in body
    assert body.count('data-state="ready"') == 2
    assert 'class="peer-CONNECTED"' in body
    assert 'id="manifest-job"' in body and "kind: Job" in body
    download = client.get(reverse("tenant:manifest", args=["team-a", ready_domain.uid, "job"]))
    assert download["Content-Disposition"].endswith('-job.yaml"')
    assert b"kind: Job" in download.content


def test_release_asks_first_then_releases(client, tenant_a, ready_domain):
    client.force_login(tenant_a)
    url = reverse("tenant:release", args=["team-a", ready_domain.uid])
    assert b"confirm-release" in client.get(url).content
    ready_domain.refresh_from_db()
    assert ready_domain.phase == "Ready"
    client.post(url, {"reason": "done"})
    ready_domain.refresh_from_db()
    assert ready_domain.phase == "Releasing"


def test_extending_a_lease_moves_its_end(client, tenant_a, ready_domain):
    client.force_login(tenant_a)
    before = ready_domain.lease_expires_at
    client.post(reverse("tenant:extend", args=["team-a", ready_domain.uid]), {"hours": 4})
    ready_domain.refresh_from_db()
    assert (ready_domain.lease_expires_at - before).total_seconds() == 4 * 3600


def test_cordon_asks_for_confirmation_then_cordons(client, operator, topology):
    node = topology.nodes.order_by("slot").first()
    client.force_login(operator)
    url = reverse("operator:node_action", args=[node.hostname, "cordon"])
    assert client.get(url).status_code == 200
    node.refresh_from_db()
    assert node.state == NodeState.READY
    resp = client.post(url, {"reason": "fan noise"})
    assert resp["Location"] == reverse("operator:node", args=[node.hostname])
    node.refresh_from_db()
    assert node.state == NodeState.CORDONED and node.state_reason == "fan noise"
    assert Event.objects.filter(verb="node.cordoned", actor_name="operator").exists()


def test_an_admin_edits_a_quota_and_bad_values_name_the_field(client, admin, ns_b):
    client.force_login(admin)
    url = reverse("admin_ui:quota_edit", args=["team-b"])
    bad = client.post(url, {"max_gpus": "-1"})
    assert bad.context["form"].errors.get("max_gpus")
    client.post(url, {"max_gpus": 64, "max_nodes": 16, "max_domains": 4, "max_lifetime_hours": 48})
    quota = Quota.objects.get(namespace=ns_b)
    assert (quota.max_gpus, quota.max_nodes, quota.max_domains) == (64, 16, 4)
    assert quota.max_lifetime.total_seconds() == 48 * 3600


def test_the_approval_queue_previews_placement_and_approves(client, admin, topology, tenant_a):
    Quota.objects.filter(namespace__name="team-a").update(approval_above_nodes=4)
    domain = request_domain(tenant_a.memberships.get().namespace, tenant_a, "huge", num_nodes=6)
    assert domain.phase == "Pending"
    client.force_login(admin)
    body = client.get(reverse("admin_ui:approvals")).content.decode()
    assert "Would land on 6 trays" in body and body.count(' highlight"') == 6
    client.post(reverse("admin_ui:approval_decide", args=[domain.uid, "approve"]))
    domain.refresh_from_db()
    assert domain.phase == "Admitted"


def test_the_approval_queue_previews_a_domain_over_two_racks(client, admin, tenant_a):
    factories.make_racks("18", "18")
    namespace = factories.make_namespace("team-big", approval_above_nodes=4)
    factories.add_member(tenant_a, namespace, "member")
    domain = request_domain(namespace, tenant_a, "two-racks", num_nodes=27)
    assert domain.phase == "Pending"
    client.force_login(admin)
    body = client.get(reverse("admin_ui:approvals")).content.decode()
    assert "Would land on 27 trays in 2 cliques over 2 racks" in body
    assert body.count(' highlight"') == 27  # both racks drawn, its trays picked out


def test_the_approval_queue_costs_the_same_queries_for_one_pending_request_and_three(
    client, admin, tenant_a, ns_a
):
    factories.make_racks("18", "9,9", ip_prefix="127.13")
    Quota.objects.filter(namespace=ns_a).update(approval_above_nodes=2, max_nodes=24, max_gpus=96)
    request_domain(ns_a, tenant_a, "big-1", num_nodes=3)
    client.force_login(admin)
    url = reverse("admin_ui:approvals")
    one = _queries(client, url)
    request_domain(
        ns_a, tenant_a, "big-2", num_nodes=9, placement_constraint="rack", placement_target="gb-r02"
    )
    request_domain(ns_a, tenant_a, "big-3", num_nodes=4)
    three = _queries(client, url)
    assert one == three
    body = client.get(url).content.decode()
    assert body.count("Would land on") == 3 and body.count('<svg class="rack"') == 3


def test_admins_manage_members(client, admin, ns_a):
    newcomer = factories.make_user("newcomer")
    client.force_login(admin)
    url = reverse("admin_ui:namespace", args=["team-a"])
    missing = client.post(url, {"username": "ghost", "role": "member"})
    assert "no user named" in missing.content.decode()
    client.post(url, {"username": "newcomer", "role": "viewer"})
    assert newcomer.memberships.get().role == "viewer"
    client.post(reverse("admin_ui:member_remove", args=["team-a", "newcomer"]))
    assert not newcomer.memberships.exists()


def test_the_audit_log_filters_and_exports_csv(client, admin, tenant_a, ready_domain):
    client.force_login(admin)
    url = reverse("admin_ui:audit")
    body = client.get(url, {"verb": "domain.requested"}).content.decode()
    assert "domain.requested" in body and "member.ready" not in body
    resp = client.get(url, {"actor": "alice", "format": "csv"})
    rows = list(csv.reader(io.StringIO(b"".join(resp.streaming_content).decode())))
    assert rows[0][:4] == ["time", "actor_kind", "actor", "verb"]
    assert rows[1:] and all(r[2] == "alice" for r in rows[1:])


def test_the_channel_ledger_lists_held_channels_per_clique(client, operator, ready_domain):
    client.force_login(operator)
    body = client.get(reverse("operator:channels")).content.decode()
    channel = ready_domain.channels.get().channel
    assert f"<td>{channel}</td>" in body and "team-a/train" in body


def test_the_channel_ledger_pages_filters_and_costs_the_same_queries_at_any_size(
    client, operator, tenant_a, ns_a, tenant_b, ns_b
):
    """At 1,000 racks the ledger holds thousands of rows: a page of cliques at a time,
    one tenant's or one rack's on request, the same queries for one clique as for four."""
    (rack_1,) = factories.make_racks("18", ip_prefix="127.13")
    form(request_domain(ns_a, tenant_a, "one", num_nodes=2))
    client.force_login(operator)
    url = reverse("operator:channels")
    one = _queries(client, url)
    factories.make_racks("9,9", "18", ip_prefix="127.13", first_rack=2)
    others = Clique.objects.exclude(rack=rack_1).order_by("pk")
    for n, clique in enumerate(others):
        namespace, user = (ns_b, tenant_b) if n == 1 else (ns_a, tenant_a)
        spec = {"placement_constraint": "clique", "placement_target": clique.label}
        form(request_domain(namespace, user, f"c{n}", num_nodes=2, **spec))
    assert _queries(client, url) == one

    everything = channel_ledger()
    assert everything.page.paginator.count == 4 and everything.channels_held == 4
    pages = [channel_ledger(page=n, per_page=3) for n in (1, 2)]
    assert [len(p.cliques) for p in pages] == [3, 1]
    labels = [c.clique.label for p in pages for c in p.cliques]
    assert len(set(labels)) == 4  # every clique once, none on two pages

    body = client.get(url, {"namespace": "team-b"}).content.decode()
    assert "team-b/" in body and "team-a/" not in body
    third = Rack.objects.order_by("name").last()
    body = client.get(url, {"q": third.name}).content.decode()
    assert body.count('<section class="card" data-clique=') == third.cliques.count()
    body = client.get(url, {"q": "no-such-rack"}).content.decode()
    assert "No channel held matches the filter." in body
    assert client.get(url, {"page": "99"}).status_code == 200  # past the end: the last page


def test_the_preview_says_when_a_request_needs_approval(client, topology, tenant_a):
    Quota.objects.filter(namespace__name="team-a").update(approval_above_nodes=4)
    client.force_login(tenant_a)
    resp = client.post(
        reverse("tenant:preview", args=["team-a"]),
        {"name": "wide", "num_nodes": 6, "allocation_mode": "Single",
         "placement_constraint": "any"},
    )  # fmt: skip
    body = resp.content.decode()
    assert 'data-preview="needs-approval"' in body
    assert "needs an admin" in body


@pytest.mark.parametrize("page", ["admin_ui:quotas", "admin_ui:namespaces", "admin_ui:audit"])
def test_admin_lists_cost_the_same_queries_for_one_namespace_and_four(
    client, admin, topology, page
):
    def populate(name: str) -> None:
        ns = factories.make_namespace(name, max_gpus=8)
        user = factories.make_user(f"{name}-user")
        factories.add_member(user, ns, "member")
        request_domain(ns, user, "d", num_nodes=1)

    client.force_login(admin)
    populate("ns-one")
    one = _queries(client, reverse(page))
    for name in ("ns-two", "ns-three", "ns-four"):
        populate(name)
    assert _queries(client, reverse(page)) == one


def test_a_cordoned_tray_that_serves_a_domain_shows_both(client, operator, ready_domain):
    member = ready_domain.members.select_related("node").first()
    node_cordon(actor=Actor.for_user(operator), node=member.node, reason="")
    client.force_login(operator)
    svg = client.get(reverse("operator:rack", args=[member.node.rack.name])).content.decode()
    assert 'class="w">cordoned · team-a/tra…<' in svg  # both, cut short to fit
    assert "cordoned, in use\ndomain: team-a/train" in svg  # the hover card
    assert 'class="tf st-cordoned"' in svg and 'fill="url(#el-cordoned)"' in svg


def test_a_request_in_gpus_is_rounded_up_to_whole_trays(client, topology, tenant_a):
    client.force_login(tenant_a)
    client.post(
        reverse("tenant:request", args=["team-a"]),
        {"name": "by-gpus", "gpus": 10, "allocation_mode": "Single",
         "placement_constraint": "any"},
    )  # fmt: skip
    assert ComputeDomain.objects.get(name="by-gpus").num_nodes == 3


def test_a_request_that_follows_the_workload_waits_for_it_on_its_page(client, topology, tenant_a):
    client.force_login(tenant_a)
    resp = client.post(
        reverse("tenant:request", args=["team-a"]),
        {"name": "wl", "size": "workload", "allocation_mode": "Single",
         "placement_constraint": "any"},
    )  # fmt: skip
    domain = ComputeDomain.objects.get(name="wl")
    assert domain.num_nodes == 0 and domain.reason == "WaitingForWorkload"
    page = client.get(resp["Location"]).content.decode()
    assert "waiting for workload" in page
    assert "follows the workload: no trays now" in page
    assert "resourceClaimTemplateName: wl-channel" in page  # its manifests, already
    assert "replicas: 12" in page  # as large as team-a's quota lets it be, until told
    page = client.get(resp["Location"] + "?replicas=4").content.decode()
    assert "replicas: 4" in page and 'value="4"' in page
    assert "deployment.yaml?replicas=4" in page.replace("/deployment.yaml", "deployment.yaml")
    page = client.get(resp["Location"] + "?replicas=99").content.decode()
    assert "replicas must be a whole number from 1 to 12" in page and 'aria-invalid="true"' in page
    download = reverse("tenant:manifest", args=["team-a", domain.uid, "job"])
    assert "completions: 4" in client.get(download + "?replicas=4").content.decode()
    bad = client.get(download + "?replicas=four")
    assert bad.status_code == 400 and "whole number of pods" in bad.content.decode()


def test_a_request_without_a_size_names_the_trays_field(client, topology, tenant_a):
    client.force_login(tenant_a)
    resp = client.post(
        reverse("tenant:request", args=["team-a"]),
        {"name": "nosize", "allocation_mode": "Single", "placement_constraint": "any"},
    )
    assert "trays (or GPUs)" in resp.context["form"].errors["num_nodes"][0]
    assert not ComputeDomain.objects.exists()


def test_trays_without_a_rack_position_are_listed_on_the_fabric(client, operator, topology):
    Node.objects.create(hostname="loose-tray", management_ip="127.13.250.1")
    client.force_login(operator)
    body = client.get(reverse("operator:fabric")).content.decode()
    assert "Trays without a rack position" in body and "loose-tray" in body


def test_manifests_refresh_on_a_phase_change_and_are_withdrawn_once_released(
    client, tenant_a, ready_domain
):
    client.force_login(tenant_a)
    url = reverse("tenant:domain", args=["team-a", ready_domain.uid]) + "?partial=manifests"
    live = client.get(url).content.decode()
    assert (
        "kind: Job" in live and 'data-live-phase="Ready"' in live and "live-phase-changed" in live
    )
    domain_release(actor=Actor.for_user(tenant_a), domain=ready_domain)
    all_clean(ready_domain)
    ready_domain.refresh_from_db()
    assert ready_domain.phase == "Released"
    ended = client.get(url).content.decode()
    assert "kind: Job" not in ended and "manifests are withdrawn" in ended
    assert "hx-get" not in ended  # an ended domain listens to nothing
