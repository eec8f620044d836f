"""The OpenAPI schema and docs, and schemathesis fuzzing the live API against its schema:
a real uvicorn process on the test database, signed in with real bearer tokens (a tenant's,
an operator's and an admin's) and, for the agent API, a real node token. Every check
schemathesis has runs on every answer: no 500, status codes, content types, headers and
bodies as documented, invalid input (negative/huge paging, strings for numbers, unknown
fields) refused, valid input accepted.

Examples per operation are bounded (API_FUZZ_EXAMPLES, default 4 valid and as many
invalid ones, per token) and derandomized so CI time stays predictable; raise it locally
to dig deeper.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis import checks as st_checks
from schemathesis.config import SchemathesisConfig

from domains.agents.joining import agent_join
from domains.audit.events import SYSTEM
from domains.inventory.models import Node
from domains.tenancy.tokens import token_create
from portal.ratelimit import TOKEN_FAILURES
from testbed.agents import ensure_join_token, node_facts
from testbed.processes import running, start_server
from tests.api.conftest import make_domain

EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", "4"))
st_checks.load_all_checks()
# Every check schemathesis has, less the two that need its stateful runner (links between
# operations), which these per-operation runs do not have.
STATEFUL = {"use_after_free", "ensure_resource_availability"}
CHECKS = [c for c in st_checks.CHECKS.get_all() if c.__name__ not in STATEFUL]
# A schema cannot state rules across fields (a window's end after its start, an e-mail
# subscription needing an address, a quota over what is in use): such schema-valid
# requests are refused with 400 naming the field, or 422, and that is what the check
# expects of them. Everything else keeps schemathesis' defaults.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "422", "429"]
            }
        }
    }
)


def test_the_schema_is_served_to_anyone_and_names_every_resource(client, db) -> None:
    response = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    paths = set(response.json()["paths"])
    for path in [
        "/api/v1/racks/",
        "/api/v1/cliques/{label}/",
        "/api/v1/nodes/{hostname}/drain/",
        "/api/v1/namespaces/{namespace}/quota/",
        "/api/v1/namespaces/{namespace}/computedomains/",
        "/api/v1/namespaces/{namespace}/computedomains/{name}/manifests/",
        "/api/v1/namespaces/{namespace}/computedomains/{name}/events/",
        "/api/v1/namespaces/{namespace}/computedomains/{name}/extend/",
        "/api/v1/events/",
        "/api/v1/approvals/{uid}/approve/",
        "/api/v1/tokens/{id}/",
    ]:
        assert path in paths
    schemes = response.json()["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearerAuth"]["description"],
    }


def test_the_docs_page_needs_no_cdn(client, db) -> None:
    response = client.get("/api/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    static = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert static.status_code == 200


def _known_parameters(fabric, domain, pending) -> dict[str, dict[str, Any]]:
    """Real objects per path prefix, so the fuzzer also reaches existing ones, not only 404s."""
    node = Node.objects.filter(rack=fabric, memberships__isnull=True).order_by("slot").first()
    return {
        "/api/v1/racks/": {"name": fabric.name},
        "/api/v1/cliques/": {"label": node.clique.label},
        "/api/v1/nodes/": {"hostname": node.hostname},
        "/api/v1/approvals/": {"uid": str(pending.uid)},
        "/api/v1/namespaces/": {"namespace": domain.namespace.name, "name": domain.name},
    }


# Reads first, then writes, then deletes: a fuzzed release must not hide the rest.
METHOD_ORDER = {"get": 0, "post": 1, "put": 2, "patch": 2, "delete": 3}


def _fuzz(
    operation, base_url: str, token: str, known: dict[str, Any], seen: Counter[str]
) -> str | None:
    """Run one operation's examples; the failure text, or None when all conformed."""
    wanted = {p.name for p in operation.path_parameters}
    prefix = next((p for p in known if operation.path.startswith(p)), "")
    fixed = {k: v for k, v in known.get(prefix, {}).items() if k in wanted}
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    strategies = [operation.as_strategy(mode) for mode in modes]
    if fixed and fixed.keys() == wanted:
        strategies += [operation.as_strategy(mode, path_parameters=fixed) for mode in modes]
    strategy = st.one_of(strategies)
    scheme = "Node" if operation.path.startswith("/api/v1/agent/") else "Bearer"
    headers = {"Authorization": f"{scheme} {token}"}

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES * 2,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded CI time
        suppress_health_check=list(HealthCheck),
    )
    def run(case) -> None:
        response = case.call_and_validate(
            base_url=base_url, headers=headers, checks=CHECKS, timeout=10
        )
        seen[f"{operation.method.upper()} {operation.path} {response.status_code}"] += 1

    try:
        run()
    except (Exception, BaseExceptionGroup) as exc:  # schemathesis raises failure groups
        return f"{operation.label}: {exc}"[:3000]
    return None


@pytest.mark.e2e
@pytest.mark.timeout(900)  # ~45 s of CPU (test and server); 90 s wall at load 8, 260 s at 27
@pytest.mark.django_db(transaction=True)
def test_the_live_api_conforms_to_its_schema(
    fabric, ns_a, ns_b, tenant_a, tenant_b, operator, admin
):
    nodes = list(Node.objects.filter(rack=fabric).order_by("slot"))
    domain = make_domain(ns_a, "train-a", nodes=nodes[:2], requested_by=tenant_a)
    make_domain(ns_b, "secret-b", nodes=nodes[2:4], requested_by=tenant_b)
    pending = make_domain(ns_a, "big-a", phase="Pending", approval="pending")
    known = _known_parameters(fabric, domain, pending)
    tokens = {
        who: token_create(actor=SYSTEM, user=user, name="fuzz")[1]
        for who, user in [("member", tenant_a), ("operator", operator), ("admin", admin)]
    }
    tray = nodes[-1]
    _, tokens["node"] = agent_join(join_token=ensure_join_token(), facts=node_facts(tray))
    known["/api/v1/agent/"] = {"node_id": tray.pk}

    TOKEN_FAILURES.reset("127.0.0.1")  # a failed earlier run must not leave us throttled
    # Every check also sends invalid credentials (hundreds here): past the usual budget
    # they would be 429, which the token tests check; here they must stay 401.
    server, url = start_server(PORTAL_TOKEN_FAILURE_LIMIT="100000")
    with running(server):
        raw = httpx.get(f"{url}/api/v1/schema/", headers={"Accept": "application/json"}).json()
        schema = schemathesis.openapi.from_dict(raw, config=CONFIG)
        operations = [result.ok() for result in schema.get_all_operations()]
        operations.sort(key=lambda op: (METHOD_ORDER[op.method.lower()], op.path))
        agent = [op for op in operations if op.path.startswith("/api/v1/agent/")]
        revoke = [op for op in operations if op.path == "/api/v1/tokens/{id}/"]
        operations = [op for op in operations if op not in revoke and op not in agent]
        assert len(operations) >= 25 and len(agent) >= 3
        seen: Counter[str] = Counter()
        # A member, an operator, then an admin; revoking tokens only at the very end, since
        # a fuzzed id can be the caller's own token. The agent API with the tray's token.
        passes = [
            (tokens["node"], agent),
            (tokens["member"], operations),
            (tokens["operator"], operations),
            (tokens["admin"], operations + revoke),
        ]
        failures = [
            failure
            for token, ops in passes
            for operation in ops
            if (failure := _fuzz(operation, url, token, known, seen))
        ]
        assert "Traceback" not in server.log(), server.log()[-5000:]
    assert not failures, f"{len(failures)} operations failed:\n\n" + "\n\n".join(failures)
    # The fuzzer reached real objects, not only 404s and 400s.
    succeeded = {key.rsplit(" ", 1)[0] for key in seen if key.endswith((" 200", " 201", " 202"))}
    print("\n".join(f"{n:4d} {key}" for key, n in sorted(seen.items())))
    assert len(succeeded) >= 20, sorted(succeeded)
