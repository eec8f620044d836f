"""Agents on Kubernetes join with their pod's projected service-account token, verified by
the API server's TokenReview and bound to the pod's node: no shared secret.

A real uvicorn server whose Kubernetes API server is the mock (testbed/kube/kubemock.py,
which issues and reviews tokens as a real one does), a real agent process reading its
token file, and the refusals a stolen or misdirected token gets. The mock, because these
tests need what a real API server cannot be made to show: a token already expired (a real
TokenRequest lasts 10 minutes at least), a count of the TokenReviews made (the review
cache), and a TokenReview that fails with 503. Upstream's API server judges the same
review, made as the web's account, in tests/kube/test_service_accounts_cluster.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from domains.agents.models import JoinToken
from domains.audit.models import Event
from domains.inventory.models import Node
from domains.security import hash_token
from testbed.kube import kubemock
from testbed.processes import running, start_server
from testbed.trays import Tray, facts_of
from tests.security.conftest import JOIN

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NAMESPACE, AGENT_SA = "domain-portal", "domain-portal-agent"
AUDIENCE = "domain-portal"


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Any]:
    """The API server (mock) and one portal web process that asks it about agents' tokens."""
    with kubemock.running() as mock:
        kubeconfig = mock.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        proc, url = start_server(
            KUBECONFIG=str(kubeconfig),
            PORTAL_AGENT_SERVICE_ACCOUNTS=f"{NAMESPACE}:{AGENT_SA}",
            PORTAL_AGENT_TOKEN_AUDIENCE=AUDIENCE,
        )
        mock.url_of_portal = url  # type: ignore[attr-defined]
        with running(proc):
            yield mock


@pytest.fixture
def http(cluster, transactional_db) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster.url_of_portal, timeout=30) as client:
        yield client


def agent_pod(mock: kubemock.KubeMock, node: str, *, sa: str = AGENT_SA) -> str:
    """The agent DaemonSet's pod on `node`; returns its name."""
    name = f"agent-{node}-{sa}"
    mock.put_node(node)
    mock.put_pod(NAMESPACE, name, node=node, service_account=sa)
    return name


def token_for(mock: kubemock.KubeMock, node: str, **kw: Any) -> str:
    return mock.issue_token(NAMESPACE, agent_pod(mock, node), audiences=(AUDIENCE,), **kw)


def join(http: httpx.Client, tray: Node, token: str) -> httpx.Response:
    body = {"hostname": tray.hostname, "ip": tray.management_ip, "service_account_token": token}
    return http.post("/api/v1/agent/join/", json=body)


def reviews(mock: kubemock.KubeMock) -> int:
    return mock.count("POST", "tokenreviews")


def refused(resp: httpx.Response, *, leaks: tuple[str, ...] = ()) -> str:
    assert resp.status_code == 403, resp.text
    body = resp.json()
    assert body["code"] == "forbidden" and body["field"] == "service_account_token"
    for name in leaks:
        assert name not in body["message"]
    return str(body["message"])


def test_a_real_agent_joins_with_its_pods_token_and_no_join_token(cluster, fabric, tmp_path):
    node = fabric.nodes.order_by("slot").first()
    token_file = tmp_path / "token"
    token_file.write_text(token_for(cluster, node.hostname))
    args = ("--service-account-token-file", str(token_file))
    tray = Tray(
        cluster.url_of_portal, facts_of(node), root=tmp_path / "tray", join_token=None, args=args
    )
    with tray:
        tray.wait_ready()
    node.refresh_from_db()
    assert node.agent_token_hash
    # The seed registered the tray; its agent's join re-registered it.
    joined = Event.objects.filter(verb="agent.rejoined", object_id=str(node.pk)).get()
    assert joined.details["credential"] == "service account token"


def test_a_token_bound_to_another_node_never_joins_as_this_one(cluster, http, fabric):
    mine, other = fabric.nodes.order_by("slot")[:2]
    stolen = token_for(cluster, other.hostname)
    message = refused(join(http, mine, stolen), leaks=(other.hostname, f"agent-{other.hostname}"))
    assert "another node" in message
    assert not Node.objects.get(pk=mine.pk).agent_token_hash
    # The same token still serves the node it is bound to.
    assert join(http, other, stolen).status_code == 201


def test_a_token_for_another_audience_is_refused(cluster, http, fabric):
    tray = fabric.nodes.order_by("slot").first()
    pod = agent_pod(cluster, tray.hostname)
    for audiences in [(kubemock.API_AUDIENCE,), ("vault",)]:
        token = cluster.issue_token(NAMESPACE, pod, audiences=audiences)
        assert "audience" in refused(join(http, tray, token))
    assert not Node.objects.get(pk=tray.pk).agent_token_hash


def test_expired_unknown_forged_and_orphaned_tokens_are_refused(cluster, http, fabric):
    tray, other = fabric.nodes.order_by("slot")[:2]
    good = token_for(cluster, tray.hostname)
    head, _, signature = token_for(cluster, other.hostname).split(".")
    forged_body = good.split(".")[1]  # this tray's claims under another token's signature
    orphan = token_for(cluster, tray.hostname)
    cluster.delete("pods", f"agent-{tray.hostname}-{AGENT_SA}", NAMESPACE)  # its pod is gone
    for token in [
        token_for(cluster, tray.hostname, expires_in=-1),  # expired
        "not-a-token",
        f"{head}.{forged_body}.{signature}",
        orphan,  # the pod it is bound to was deleted (its claims still say this tray)
    ]:
        assert "not valid" in refused(join(http, tray, token))
    assert not Node.objects.get(pk=tray.pk).agent_token_hash


def test_another_service_accounts_token_is_refused(cluster, http, fabric):
    tray = fabric.nodes.order_by("slot").first()
    pod = agent_pod(cluster, tray.hostname, sa="default")
    token = cluster.issue_token(NAMESPACE, pod, audiences=(AUDIENCE,))
    assert "service account" in refused(join(http, tray, token))


def test_a_review_is_reused_and_its_node_may_join_again(cluster, http, fabric):
    tray = fabric.nodes.order_by("slot").first()
    token = token_for(cluster, tray.hostname)
    before = reviews(cluster)
    first = join(http, tray, token)
    assert first.status_code == 201, first.text
    # The tray now has a live agent; a join token could not take it over, but its own
    # node's token proves it is that agent (its node token lost with its state directory).
    again = join(http, tray, token)
    assert again.status_code == 201, again.text
    assert reviews(cluster) == before + 1  # one TokenReview for both joins
    old = {"Authorization": f"Node {first.json()['token']}"}
    assert http.get(f"/api/v1/agent/nodes/{tray.pk}/desired/", headers=old).status_code == 401


def test_the_api_server_away_is_a_503_not_a_refusal(cluster, http, fabric):
    tray = fabric.nodes.order_by("slot").first()
    token = token_for(cluster, tray.hostname)
    cluster.fail_next("POST", "tokenreviews", status=503)
    resp = join(http, tray, token)
    assert resp.status_code == 503, resp.text
    assert resp.json()["code"] == "unavailable"
    assert join(http, tray, token).status_code == 201  # the failure was not cached


def test_the_join_token_still_works_and_one_credential_is_asked(cluster, http, fabric):
    JoinToken.objects.create(token_hash=hash_token(JOIN), name="security")
    tray = fabric.nodes.order_by("slot").first()
    body = {"hostname": tray.hostname, "ip": tray.management_ip}
    assert http.post("/api/v1/agent/join/", json={**body, "join_token": JOIN}).status_code == 201
    both = {**body, "join_token": JOIN, "service_account_token": token_for(cluster, tray.hostname)}
    for wrong in (body, both):
        resp = http.post("/api/v1/agent/join/", json=wrong)
        assert resp.status_code == 400, resp.text
        assert "one credential" in resp.json()["message"]
