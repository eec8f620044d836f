"""ComputeDomains out (published, status mirrored, removed) and in (adopted from kubectl).

The tests marked `cluster` run against upstream's kube-apiserver with NVIDIA's CRD
installed; the others need faults or request counts only the mock API server gives."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from kubernetes.client.exceptions import ApiException

from agentwire.messages import Step
from domains.audit.events import Actor
from domains.computedomains.models import ComputeDomain, DomainSource, Phase
from domains.computedomains.services import domain_release
from domains.kube import publisher, tasks
from domains.kube.crd import (
    MESSAGE_ANNOTATION,
    PHASE_ANNOTATION,
    RACKS_ANNOTATION,
    status_annotations,
)
from domains.kube.models import PublishedDomain, RefusedComputeDomain
from testbed import factories
from testbed.kube.kubemock import KINDS, ApiError
from testbed.kube.objects import computedomain
from testbed.kube.schemas import assert_valid_computedomain, computedomain_schema
from tests.support.lifecycle import (
    all_clean,
    all_ready,
    report,
    request_and_place,
    request_domain,
    run_pods,
)

pytestmark = pytest.mark.django_db

CDS = r"/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains"


def cd(kube, name: str, namespace: str = "team-a") -> dict | None:
    return kube.get("computedomains", name, namespace)


@pytest.mark.cluster
def test_a_domain_is_published_with_its_status_and_removed_on_release(
    real_kube, eager_celery, django_capture_on_commit_callbacks, topology, ns_a, tenant_a
):
    with django_capture_on_commit_callbacks(execute=True):
        domain = request_and_place(ns_a, tenant_a, num_nodes=3)
    obj = cd(real_kube, "train")
    assert_valid_computedomain({k: obj[k] for k in ("apiVersion", "kind", "spec", "status")})
    assert obj["spec"]["numNodes"] == 3
    assert obj["metadata"]["annotations"]["portal.domains/domain-uid"] == str(domain.uid)
    assert obj["metadata"]["annotations"]["portal.domains/phase"] == "Forming"
    assert obj["status"] == {"status": "NotReady"}  # no pod yet: no nodes, as NVIDIA's

    with django_capture_on_commit_callbacks(execute=True):
        all_ready(domain)
        run_pods(domain)
    obj = cd(real_kube, "train")
    assert obj["status"]["status"] == "Ready"
    assert [n["index"] for n in obj["status"]["nodes"]] == [0, 1, 2]
    assert {n["status"] for n in obj["status"]["nodes"]} == {"Ready"}
    assert_valid_computedomain({k: obj[k] for k in ("apiVersion", "kind", "spec", "status")})

    with django_capture_on_commit_callbacks(execute=True):
        domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    assert cd(real_kube, "train")["metadata"]["annotations"]["portal.domains/phase"] == "Releasing"
    with django_capture_on_commit_callbacks(execute=True):
        all_clean(domain)
    assert cd(real_kube, "train") is None
    assert PublishedDomain.objects.get(domain=domain).removed


@pytest.mark.cluster
def test_the_api_server_rejects_what_nvidias_crd_rejects(real_kube):
    bad = computedomain("bad", "team-a") | {"spec": {"numNodes": -1, "channel": {}}}
    with pytest.raises(ApiException) as caught:
        real_kube.apply(bad)
    assert caught.value.status == 422
    assert "spec.numNodes" in caught.value.body
    assert real_kube.get("computedomains", "bad", "team-a") is None


@pytest.mark.cluster
def test_the_status_is_a_subresource_and_unknown_fields_are_pruned(real_kube):
    body = computedomain("cd", "team-a") | {"status": {"status": "Ready", "nodes": []}}
    body["spec"]["portalOnly"] = "dropped"
    created = real_kube.apply(body)
    assert "status" not in created  # the object's own writes never set the status
    assert "portalOnly" not in created["spec"]
    status = {"status": "Ready", "nodes": [], "portalPhase": "dropped"}
    real_kube.resource("computedomains").status.patch(
        name="cd",
        namespace="team-a",
        body={"status": status, "spec": {"numNodes": 7}},
        content_type="application/merge-patch+json",
    )
    obj = real_kube.get("computedomains", "cd", "team-a")
    assert obj["status"] == {"status": "Ready", "nodes": []}
    assert obj["spec"]["numNodes"] == 2  # the status subresource changes only the status


def test_the_mock_api_server_rejects_what_the_crd_rejects(kube):
    computedomain_schema()  # skips without NVIDIA's CRD
    bad = computedomain("bad", "team-a") | {"spec": {"numNodes": -1, "channel": {}}}
    with pytest.raises(ApiError, match="ComputeDomain is invalid"):
        kube.create(KINDS["computedomains"], "team-a", bad)
    assert kube.get("computedomains", "bad", "team-a") is None


@pytest.mark.cluster
def test_publishing_twice_writes_nothing_new(real_kube, topology, ns_a, tenant_a):
    domain = request_and_place(ns_a, tenant_a)
    assert tasks.publish_domain(domain.pk) == "created"
    obj = real_kube.get("computedomains", domain.name, "team-a")
    template = real_kube.get("resourceclaimtemplates", domain.resource_claim_template, "team-a")
    assert obj is not None and template is not None
    assert tasks.publish_domain(domain.pk) == "unchanged"
    # No write reached either object: the API server bumps resourceVersion on every one.
    again = real_kube.get("computedomains", domain.name, "team-a")
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    kept = real_kube.get("resourceclaimtemplates", domain.resource_claim_template, "team-a")
    assert kept["metadata"]["resourceVersion"] == template["metadata"]["resourceVersion"]


@pytest.mark.cluster
def test_a_namespace_missing_from_the_cluster_is_recorded_not_retried(
    real_kube, topology, tenant_a
):
    portal_only = factories.make_namespace("portal-only")
    factories.add_member(tenant_a, portal_only, "member")
    domain = request_and_place(portal_only, tenant_a)
    assert tasks.publish_domain(domain.pk).startswith("refused")
    row = PublishedDomain.objects.get(domain=domain)
    assert "namespace portal-only does not exist" in row.last_error
    assert tasks.reconcile() == {"domains": 0, "refusals": 0, "claims": 0}  # not retried every pass


def test_api_errors_while_publishing_are_retried_and_reconcile_catches_up(
    kube, eager_celery, django_capture_on_commit_callbacks, topology, ns_a, tenant_a
):
    kube.fail_next("POST", CDS, status=500, times=2)
    with django_capture_on_commit_callbacks(execute=True):
        domain = request_and_place(ns_a, tenant_a)
    assert cd(kube, "train") is not None  # the task retried through two 500s
    assert kube.count("POST", CDS) == 3

    # The API server is away for longer than every retry: the change waits in the database.
    kube.fail_next("*", CDS, status=503, times=100)
    with django_capture_on_commit_callbacks(execute=True):
        all_ready(domain)
        for claim in run_pods(domain):  # each pod's claim, as the cluster holds it
            kube.put_claim(claim["namespace"], claim["name"], uid=claim["uid"], pod="w")
    assert cd(kube, "train")["status"]["status"] == "NotReady"
    still_away = {"domains": 0, "refusals": 0, "claims": 0, "stopped": 1}
    assert tasks.reconcile() == still_away
    kube.faults.clear()
    assert tasks.reconcile() == {"domains": 1, "refusals": 0, "claims": 0}
    assert cd(kube, "train")["status"]["status"] == "Ready"
    assert tasks.reconcile() == {"domains": 0, "refusals": 0, "claims": 0}  # nothing left to do


@pytest.mark.cluster
def test_a_computedomain_created_with_kubectl_is_adopted_as_a_request(
    real_kube, real_sync, topology, ns_a
):
    real_kube.apply(computedomain("gitops", "team-a", num_nodes=2, allocationMode="All"))
    real_sync.step("computedomains")
    domain = ComputeDomain.objects.get(namespace=ns_a, name="gitops")
    assert domain.source == DomainSource.KUBERNETES
    assert (domain.num_nodes, domain.allocation_mode) == (2, "All")
    assert domain.resource_claim_template == "gitops-channel"
    assert domain.phase == Phase.FORMING  # placed by the (eager) placement task
    obj = cd(real_kube, "gitops")
    assert obj["spec"]["channel"]["allocationMode"] == "All"  # the user's spec, untouched
    assert obj["metadata"]["annotations"]["portal.domains/domain-uid"] == str(domain.uid)
    assert obj["status"] == {"status": "NotReady"}  # placed, formed; its pods not there yet
    assert PublishedDomain.objects.get(domain=domain).adopted

    real_sync.step("computedomains")  # our own writes come back by watch: nothing new happens
    assert ComputeDomain.objects.filter(name="gitops").count() == 1


@pytest.mark.cluster
def test_deleting_the_object_with_kubectl_releases_the_domain(real_kube, real_sync, topology, ns_a):
    real_kube.apply(computedomain("gitops", "team-a"))
    real_sync.step("computedomains")
    domain = ComputeDomain.objects.get(name="gitops")
    real_kube.delete("computedomains", "gitops", "team-a")
    real_sync.step("computedomains")
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASING


@pytest.mark.cluster
def test_a_numnodes_0_computedomain_is_adopted_and_waits_for_its_workload(
    real_kube, real_sync, eager_celery, topology, ns_a
):
    """NVIDIA's default: nothing is placed; the phase says it waits for the workload."""
    real_kube.apply(computedomain("follow", "team-a", num_nodes=0))
    real_sync.step("computedomains")
    domain = ComputeDomain.objects.get(name="follow")
    assert domain.num_nodes == 0 and domain.phase == Phase.ADMITTED
    assert domain.reason == "WaitingForWorkload"
    assert not domain.members.exists() and not domain.channels.exists()
    obj = cd(real_kube, "follow")
    assert obj["metadata"]["annotations"]["portal.domains/reason"] == "WaitingForWorkload"
    # NVIDIA's controller says Ready: all of its numNodes (0) trays are ready.
    assert obj["status"] == {"status": "Ready"}
    assert real_kube.get("resourceclaimtemplates", "follow-channel", "team-a") is not None


@pytest.mark.parametrize(
    ("namespace", "num_nodes", "reason", "text"),
    [
        ("team-b", 8, "QuotaExceeded", "over the quota of namespace team-b"),
        ("kube-public", 2, "Invalid", "namespace kube-public is not a tenant"),
    ],
)
@pytest.mark.cluster
def test_a_refused_computedomain_says_why_on_the_object(
    real_kube, real_sync, topology, ns_b, namespace, num_nodes, reason, text
):
    real_kube.put_namespace(namespace)  # in the cluster, not a tenant of the portal
    real_kube.apply(computedomain("big", namespace, num_nodes=num_nodes))
    real_sync.step("computedomains")
    assert not ComputeDomain.objects.filter(name="big").exists()
    obj = cd(real_kube, "big", namespace)
    assert obj["status"] == {"status": "NotReady"}
    annotations = obj["metadata"]["annotations"]
    assert annotations["portal.domains/phase"] == "Refused"
    assert annotations["portal.domains/reason"] == reason
    assert text in annotations["portal.domains/message"]
    assert RefusedComputeDomain.objects.get(name="big").reported
    assert_valid_computedomain({k: obj[k] for k in ("apiVersion", "kind", "spec", "status")})


@pytest.mark.cluster
def test_a_refused_computedomain_is_adopted_at_resync_once_quota_frees(
    real_kube, real_sync, topology, ns_b, admin
):
    from domains.tenancy.services import quota_set

    real_kube.apply(computedomain("big", "team-b", num_nodes=8))
    real_sync.step("computedomains")
    assert RefusedComputeDomain.objects.filter(name="big").exists()
    before = cd(real_kube, "big", "team-b")["metadata"]["annotations"]["portal.domains/message"]

    quota_set(actor=Actor.for_user(admin), namespace=ns_b, max_nodes=7)  # still too small
    real_sync["computedomains"].version = None  # the next resync
    real_sync.step("computedomains")
    after = cd(real_kube, "big", "team-b")["metadata"]["annotations"]["portal.domains/message"]
    assert after != before and "7" in after  # the object says why now, not why then

    quota_set(actor=Actor.for_user(admin), namespace=ns_b, max_nodes=8, max_gpus=32)
    real_sync["computedomains"].version = None  # the next resync
    real_sync.step("computedomains")
    assert ComputeDomain.objects.get(name="big").num_nodes == 8
    assert not RefusedComputeDomain.objects.exists()


def annotations_of(kube, name: str) -> dict[str, str]:
    return cd(kube, name)["metadata"]["annotations"]


@pytest.mark.cluster
def test_a_domain_over_two_racks_names_its_racks_and_the_clique_it_waits_for(
    real_kube, eager_celery, django_capture_on_commit_callbacks, ns_a, tenant_a
):
    """NVIDIA's CRD has no field for them: `portal.domains/racks` lists the racks, and the
    message names the clique (and rack) not ready, forming and degraded."""
    factories.make_racks("3", "3")  # two racks, a 3-tray clique each: 4 trays span both
    with django_capture_on_commit_callbacks(execute=True):
        domain = request_and_place(ns_a, tenant_a, num_nodes=4)
    assert annotations_of(real_kube, "train")[RACKS_ANNOTATION] == "gb-r01,gb-r02"
    members = list(domain.members.select_related("node", "clique__rack").order_by("node__hostname"))
    whole = [m for m in members if m.clique == members[0].clique]
    (lone,) = [m for m in members if m.clique != members[0].clique]
    assert len(whole) == 3
    with django_capture_on_commit_callbacks(execute=True):
        for member in whole:
            report(member.node, domain, Step.READY)
    waiting = f"clique {lone.clique.name} (rack {lone.clique.rack.name})"
    assert annotations_of(real_kube, "train")[MESSAGE_ANNOTATION] == (
        f"3 of 4 members ready; waiting for {waiting}"
    )

    with django_capture_on_commit_callbacks(execute=True):
        all_ready(domain)
        report(lone.node, domain, Step.FAILED, error="nvidia-imex exited with status 1")
    annotations = annotations_of(real_kube, "train")
    assert annotations[PHASE_ANNOTATION] == "Degraded"
    assert annotations[MESSAGE_ANNOTATION].startswith(f"{waiting}: {lone.node.hostname} failed")
    assert annotations[RACKS_ANNOTATION] == "gb-r01,gb-r02"


def test_a_following_domains_racks_are_those_its_pods_landed_in(topology, ns_a, tenant_a):
    (second,) = factories.make_racks("2", first_rack=2)
    domain = request_domain(ns_a, tenant_a, "follow", num_nodes=0)
    assert status_annotations(domain)[RACKS_ANNOTATION] == ""  # no pod yet
    run_pods(domain, second.nodes.order_by("slot").first())
    assert status_annotations(domain)[RACKS_ANNOTATION] == second.name
    run_pods(domain, topology.nodes.order_by("slot").first())
    assert status_annotations(domain)[RACKS_ANNOTATION] == f"{topology.name},{second.name}"


def test_a_burst_of_changes_queues_one_publish_and_a_change_after_it_queues_the_next(
    kube, topology, ns_a, tenant_a
):
    """72 trays joining change their domain hundreds of times in seconds: one publish is
    queued for the burst; once it has started, the next change queues another."""
    from celery.signals import before_task_publish
    from django.core.cache import cache

    from domains import signals

    domain = request_and_place(ns_a, tenant_a)
    queued: list[str] = []

    def count(sender: str = "", **kwargs: object) -> None:
        queued.append(sender)

    def changed() -> None:
        signals.domain_changed.send(
            sender=None,
            domain_uid=str(domain.uid),
            namespace_id=domain.namespace_id,
            phase=domain.phase,
        )

    cache.delete(tasks.PUBLISHES.key(domain.pk))
    before_task_publish.connect(count, weak=False)
    try:
        for _ in range(5):
            changed()
        assert queued.count("kube.publish_domain") == 1
        assert tasks.publish_domain(domain.pk) == "created"  # clears the mark first
        changed()
        assert queued.count("kube.publish_domain") == 2
    finally:
        before_task_publish.disconnect(count)
        cache.delete(tasks.PUBLISHES.key(domain.pk))


class SlowCluster(publisher.Cluster):
    """The publisher's own calls, the first read of the object held until `go` is set: a
    publish that started before a change and ends after the next publish has run."""

    def __init__(self) -> None:
        super().__init__()
        self.reading, self.go = threading.Event(), threading.Event()

    def get(self, namespace: str, name: str):
        self.reading.set()
        assert self.go.wait(60)
        return super().get(namespace, name)


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_a_publish_still_running_at_release_leaves_no_template_or_object_behind(
    real_kube, topology, ns_a, tenant_a
):
    domain = request_and_place(ns_a, tenant_a)
    assert tasks.publish_domain(domain.pk) == "created"
    slow, answers = SlowCluster(), {}

    def publish(name: str, cluster=None) -> None:
        try:
            answers[name] = publisher.publish_domain(domain_id=domain.pk, cluster=cluster)
        finally:
            connections.close_all()

    older = threading.Thread(target=publish, args=("older", slow))
    older.start()
    assert slow.reading.wait(30)  # it has read the domain live and is on its way
    domain_release(actor=Actor.for_user(tenant_a), domain=domain, reason="done")
    all_clean(domain)
    assert ComputeDomain.objects.get(pk=domain.pk).phase == Phase.RELEASED
    newer = threading.Thread(target=publish, args=("newer",))
    newer.start()
    newer.join(timeout=3)  # the older one still holds the domain: this one waits for it
    slow.go.set()
    older.join(timeout=60)
    newer.join(timeout=60)
    assert answers == {"older": "unchanged", "newer": "removed"}
    assert real_kube.get("resourceclaimtemplates", domain.resource_claim_template, "team-a") is None
    assert cd(real_kube, domain.name) is None  # deleted, and no finalizer held again
