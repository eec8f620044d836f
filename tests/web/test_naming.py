"""One name per thing: a clique is called by its short name on the pages and by its label
(`nvidia.com/gpu.clique`) in the API and the manifests; every place that shows one shows the
other beside it, so either can be found from the other."""

from __future__ import annotations

import pytest
from django.urls import reverse

from domains.kube.manifests import workload_manifests
from tests.api.conftest import bearer_client

pytestmark = pytest.mark.django_db


def _both(body: str, clique) -> bool:
    return (
        f'<span class="clique-name">{clique.name}</span>' in body
        and f">{clique.label}</code>" in body
    )


def test_the_tenants_domain_page_names_its_clique_as_the_pages_and_the_api_do(
    client, tenant_a, ready_domain
):
    clique = ready_domain.members.first().clique
    client.force_login(tenant_a)
    body = client.get(reverse("tenant:domain", args=["team-a", ready_domain.uid])).content
    assert 'id="domain-clique"' in body.decode()
    assert _both(body.decode(), clique)

    api = bearer_client(tenant_a).get(
        f"/api/v1/namespaces/team-a/computedomains/{ready_domain.name}/"
    )
    member = api.json()["status"]["nodes"][0]
    assert (member["cliqueID"], member["cliqueName"]) == (clique.label, clique.name)


def test_the_tray_page_and_the_channel_ledger_show_the_cliques_name_and_label(
    client, operator, ready_domain
):
    node = ready_domain.members.first().node
    client.force_login(operator)
    tray = client.get(reverse("operator:node", args=[node.hostname])).content.decode()
    assert _both(tray, node.clique)
    ledger = client.get(reverse("operator:channels")).content.decode()
    assert _both(ledger, node.clique)

    api = bearer_client(operator).get(f"/api/v1/nodes/{node.hostname}/").json()
    assert (api["clique"], api["cliqueName"]) == (node.clique.label, node.clique.name)


def test_a_manifest_names_the_clique_by_both_names(ready_domain):
    clique = ready_domain.members.first().clique
    job = workload_manifests(ready_domain)["job"]
    assert f"in clique {clique.name} (nvidia.com/gpu.clique={clique.label})." in job
    assert f"- {clique.label}" in job  # what the scheduler matches stays the label
