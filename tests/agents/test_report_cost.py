"""What an agent's report that changes its member costs, in queries, whatever the domain's
size: one statement on the web, and one fold per burst of reports on a worker (queued at
once for the burst's last report)."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentwire.messages import Step, status_report
from domains.agents.fold import reports_fold
from domains.agents.heartbeats import agent_heartbeat
from domains.agents.joining import agent_join
from domains.agents.selectors import reports_settled
from domains.agents.tasks import FOLDS
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain, DomainMember, MemberState, Phase
from domains.computedomains.services import domain_release
from domains.inventory.models import Node
from testbed import factories
from testbed.agents import ensure_join_token, node_facts
from tests.support.lifecycle import ready_report, request_and_place

pytestmark = pytest.mark.django_db

SIZES = (2, 15)  # with WARM_UP, all fit the 18 trays of `topology` at once
# The fold of a domain of this size first: a histogram's rows are made at its first
# observation (three statements more), and a test that ran before in this database may have
# emptied the table.
WARM_UP = 1
# The fold of a burst: the domain's lock, its members with their trays' reports, one UPDATE
# of the members, one INSERT of their events, the phase's compare-and-set, the domain's
# event, the formation's three histograms (/metrics); and here, inside the test's
# transaction, a savepoint and its release.
FOLD_QUERIES = 11


@pytest.fixture
def big_ns(db):
    return factories.make_namespace("team-big", max_nodes=36, max_nodes_per_domain=18)


@pytest.fixture
def worker_folds(settings):
    settings.PORTAL = {**settings.PORTAL, "FOLD_REPORTS_ON_WORKER": True}


def placed_with_tokens(ns, user, size: int) -> tuple[ComputeDomain, dict[Node, str]]:
    domain = request_and_place(ns, user, name=f"d{size}", num_nodes=size)
    assert domain.phase == Phase.FORMING
    join = ensure_join_token()
    tokens = {}
    for member in DomainMember.objects.filter(domain=domain).select_related("node__clique"):
        _, raw = agent_join(join_token=join, facts=node_facts(member.node))
        tokens[member.node] = raw
    domain.refresh_from_db()
    return domain, tokens


def test_a_changing_report_is_one_statement_on_the_web_whatever_the_size(
    topology, big_ns, tenant_a, worker_folds, django_capture_on_commit_callbacks
):
    counts = []
    for size in SIZES:
        domain, tokens = placed_with_tokens(big_ns, tenant_a, size)
        node, token = next(iter(tokens.items()))
        report = ready_report(domain)
        with (
            django_capture_on_commit_callbacks() as callbacks,
            CaptureQueriesContext(connection) as queries,
        ):
            assert agent_heartbeat(node_id=node.pk, token=token, report=report)
        counts.append(len(queries))
        assert len(callbacks) == 2  # the daemon's state for the fabric view; a fold to queue
        member = DomainMember.objects.get(domain=domain, node=node)
        assert member.state == MemberState.ASSIGNED  # folded on a worker, not here
        assert Node.objects.get(pk=node.pk).agent_report["step"] == Step.READY
    assert counts == [1, 1]


def test_a_burst_of_reports_is_folded_in_a_constant_number_of_queries(
    topology, big_ns, tenant_a, worker_folds, django_capture_on_commit_callbacks
):
    counts = []
    for size in (WARM_UP, *SIZES):
        domain, tokens = placed_with_tokens(big_ns, tenant_a, size)
        with django_capture_on_commit_callbacks():
            for node, token in tokens.items():
                assert agent_heartbeat(node_id=node.pk, token=token, report=ready_report(domain))
        with CaptureQueriesContext(connection) as queries:
            assert reports_fold(domain_id=domain.pk) == size
        counts.append(len(queries))
        domain.refresh_from_db()
        assert domain.phase == Phase.READY
        assert Event.objects.filter(domain=domain, verb="member.ready").count() == size
        assert not domain.members.exclude(state=MemberState.READY).exists()
    assert counts[1] == counts[2] <= FOLD_QUERIES


def test_a_fold_with_nothing_new_changes_nothing(topology, big_ns, tenant_a, worker_folds):
    domain, tokens = placed_with_tokens(big_ns, tenant_a, 2)
    for node, token in tokens.items():
        agent_heartbeat(node_id=node.pk, token=token, report=ready_report(domain))
    assert reports_fold(domain_id=domain.pk) == 2
    events = Event.objects.count()
    assert reports_fold(domain_id=domain.pk) == 0
    assert Event.objects.count() == events


def test_clean_reports_folded_at_once_finish_the_release(
    topology, big_ns, tenant_a, worker_folds, django_capture_on_commit_callbacks
):
    domain, tokens = placed_with_tokens(big_ns, tenant_a, 4)
    for node, token in tokens.items():
        agent_heartbeat(node_id=node.pk, token=token, report=ready_report(domain))
    reports_fold(domain_id=domain.pk)
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    domain.refresh_from_db()
    clean = status_report(
        domain_uid=str(domain.uid),
        generation_applied=domain.generation,
        step=Step.IDLE,
        clean=True,
        message="tray clean",
    )
    with django_capture_on_commit_callbacks():
        for node, token in tokens.items():
            assert agent_heartbeat(node_id=node.pk, token=token, report=clean)
    assert reports_fold(domain_id=domain.pk) == 4
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASED
    assert not domain.members.filter(active=True).exists()
    assert Event.objects.filter(domain=domain, verb="member.released").count() == 4


def test_a_report_about_another_domain_queues_no_fold(
    topology, big_ns, tenant_a, worker_folds, django_capture_on_commit_callbacks
):
    _, tokens = placed_with_tokens(big_ns, tenant_a, 2)
    node, token = next(iter(tokens.items()))
    stale = status_report(
        domain_uid="00000000-0000-4000-8000-000000000000", generation_applied=1, step=Step.READY
    )
    with django_capture_on_commit_callbacks() as callbacks:
        assert agent_heartbeat(node_id=node.pk, token=token, report=stale)
    assert callbacks == []


def test_a_clean_report_from_before_the_release_lets_no_tray_go(
    topology, big_ns, tenant_a, worker_folds, django_capture_on_commit_callbacks
):
    domain, tokens = placed_with_tokens(big_ns, tenant_a, 2)
    (early, early_token), (late, late_token) = tokens.items()
    # Before it fetched its desired state, one tray said it was idle and clean.
    idle = status_report(domain_uid=None, generation_applied=0, step=Step.IDLE, clean=True)
    with django_capture_on_commit_callbacks():
        assert agent_heartbeat(node_id=early.pk, token=early_token, report=idle)
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    domain.refresh_from_db()
    clean = status_report(
        domain_uid=str(domain.uid),
        generation_applied=domain.generation,
        step=Step.IDLE,
        clean=True,
    )
    with django_capture_on_commit_callbacks():
        assert agent_heartbeat(node_id=late.pk, token=late_token, report=clean)
    assert reports_fold(domain_id=domain.pk) == 1  # only the report since the release
    assert DomainMember.objects.get(domain=domain, node=early).active
    domain.refresh_from_db()
    assert domain.phase == Phase.RELEASING


def test_reports_are_settled_once_every_member_said_ready_then_clean(
    topology, big_ns, tenant_a, worker_folds, django_capture_on_commit_callbacks
):
    domain, tokens = placed_with_tokens(big_ns, tenant_a, 3)
    (first, first_token), *rest = tokens.items()
    with django_capture_on_commit_callbacks():
        for node, token in rest:
            agent_heartbeat(node_id=node.pk, token=token, report=ready_report(domain))
        assert not reports_settled(domain.pk)  # one tray has not said it yet
        # A stale "clean" of no domain is no word about this one.
        idle = status_report(domain_uid=None, generation_applied=0, step=Step.IDLE, clean=True)
        agent_heartbeat(node_id=first.pk, token=first_token, report=idle)
        assert not reports_settled(domain.pk)
        agent_heartbeat(node_id=first.pk, token=first_token, report=ready_report(domain))
    assert reports_settled(domain.pk)
    reports_fold(domain_id=domain.pk)
    assert not reports_settled(domain.pk)  # Ready: no burst of this kind to finish
    domain_release(actor=Actor.for_user(tenant_a), domain=domain)
    domain.refresh_from_db()
    clean = status_report(
        domain_uid=str(domain.uid), generation_applied=domain.generation, step=Step.IDLE, clean=True
    )
    with django_capture_on_commit_callbacks():
        for node, token in tokens.items():
            assert not reports_settled(domain.pk)
            agent_heartbeat(node_id=node.pk, token=token, report=clean)
    assert reports_settled(domain.pk)


def test_the_bursts_last_report_queues_its_fold_without_the_wait(
    topology, big_ns, tenant_a, worker_folds, django_capture_on_commit_callbacks
):
    """The first reports of a burst mark a fold pending (it runs FOLD_QUIET_S later, with
    whatever else arrived); the last one queues its own at once and marks nothing."""
    domain, tokens = placed_with_tokens(big_ns, tenant_a, 2)
    (first, first_token), (last, last_token) = tokens.items()
    cache.delete(FOLDS.key(domain.pk))
    with django_capture_on_commit_callbacks(execute=True):
        agent_heartbeat(node_id=first.pk, token=first_token, report=ready_report(domain))
    assert cache.get(FOLDS.key(domain.pk)) == 1
    cache.delete(FOLDS.key(domain.pk))
    with django_capture_on_commit_callbacks(execute=True):
        agent_heartbeat(node_id=last.pk, token=last_token, report=ready_report(domain))
    assert cache.get(FOLDS.key(domain.pk)) is None
