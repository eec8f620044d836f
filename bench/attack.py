"""The outside attack (docs/security.md), repeated against a running portal, with its figures.

    make demo                                   # in one terminal (DEBUG on: demo logins)
    .venv/bin/python bench/attack.py --url http://127.0.0.1:8000

Signs in as the demo users (password `demo`), makes each an API token, and then attacks as
an outsider would: schemathesis with every check on the OpenAPI schema with a tenant's, an
operator's and an admin's token; a list of hostile inputs on every JSON endpoint; one
tenant reaching for the other's objects; 20 concurrent requests racing the quota; password
guessing on both login forms, with made-up X-Forwarded-For; bad bearer tokens; and the
fleet's join token re-registering a tray whose agent is alive, and a forged Kubernetes
service-account token presented instead of it. Prints the figures: requests
tried, bad inputs tried, 5xx seen, isolation violations, quota overruns, and each finding
held or not. Run it against a throwaway demo: it pauses the operator's sign-in from this
address for the cool-off (15 minutes) and creates and releases domains in team-b.

Then the second attack (bench/attack_limits.py): a tray's own token changing its identity,
one tenant's webhook tarpit against another's request → Ready, a 200 MB body and slow
bodies, a guesser beside a bystander, sockets after a membership ends and a logout,
sockets per user and per tray, refusals that fill the audit log, token and subscription
ceilings, and the IPv6 SSRF residue; each with its figure. It reads one emulated tray's
node token from the demo's agents (`--agent-root`, default var/agents).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import attack_limits  # bench/: the second attack, its successor
import httpx
import requests

COUNT: Counter[str] = Counter()


def hit(resp: httpx.Response | requests.Response, bad_input: bool = False) -> Any:
    COUNT["requests"] += 1
    COUNT["bad inputs"] += bad_input
    if resp.status_code >= 500:
        COUNT["5xx"] += 1
        print(f"  5xx: {resp.request.method} {resp.request.url} -> {resp.status_code}")
    return resp


def sign_in(url: str, username: str, password: str, path: str = "/login/", **kw: Any):
    client = httpx.Client(base_url=url, timeout=30, **kw)
    hit(client.get(path))
    form = {"username": username, "password": password}
    form["csrfmiddlewaretoken"] = client.cookies.get("csrftoken", "")
    return client, hit(client.post(path, data=form, headers=kw.get("headers", {})))


def api_token(url: str, username: str, password: str) -> str:
    # From an address of its own (all of 127/8 is loopback): a rerun's sign-in is not
    # paused by the previous run's guessing from 127.0.0.1.
    source = f"127.0.{uuid.uuid4().int % 200 + 10}.{uuid.uuid4().int % 250 + 1}"
    client, resp = sign_in(
        url, username, password, transport=httpx.HTTPTransport(local_address=source)
    )
    assert resp.status_code == 302, f"cannot sign in as {username} ({resp.status_code})"
    headers = {"X-CSRFToken": client.cookies["csrftoken"]}
    resp = hit(client.post("/api/v1/tokens/", json={"name": "attack"}, headers=headers))
    assert resp.status_code == 201, resp.text
    return resp.json()["token"]


def fuzz(url: str, tokens: dict[str, str], examples: int) -> int:
    """schemathesis, every check, each operation with each token; the failures found."""
    import schemathesis
    from hypothesis import strategies as st
    from schemathesis import GenerationMode
    from schemathesis import checks as st_checks
    from schemathesis.config import SchemathesisConfig

    st_checks.load_all_checks()
    checks = [
        c
        for c in st_checks.CHECKS.get_all()
        if c.__name__ not in {"use_after_free", "ensure_resource_availability", "ignored_auth"}
    ]
    raw = hit(httpx.get(f"{url}/api/v1/schema/", headers={"Accept": "application/json"})).json()
    # As in tests/api/test_schema.py: a schema-valid request that breaks a rule across
    # fields (a window ending before it starts) may be refused with 400 naming the field.
    statuses = ["2xx", "400", "401", "403", "404", "409", "422", "429"]
    config = SchemathesisConfig.from_dict(
        {"checks": {"positive_data_acceptance": {"expected-statuses": statuses}}}
    )
    schema = schemathesis.openapi.from_dict(raw, config=config)
    session = requests.Session()
    session.hooks["response"].append(lambda resp, *a, **k: hit(resp, bad_input=False))
    failures = 0
    for who, token in tokens.items():
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.path.startswith("/api/v1/agent/") or operation.path.startswith(
                "/api/v1/tokens/{"
            ):
                continue  # agents have their own tokens; revoking our own ends the run
            modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
            strategy = st.one_of([operation.as_strategy(m) for m in modes])

            run = _runner(strategy, url, session, checks, token, examples)
            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:
                failures += 1
                print(f"  schemathesis ({who}): {operation.label}: {str(exc).splitlines()[0]}")
    return failures


def _runner(strategy: Any, url: str, session: Any, checks: list, token: str, examples: int):
    from hypothesis import HealthCheck, Phase, given, settings

    @given(case=strategy)
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        case.call_and_validate(
            base_url=url, session=session, checks=checks, timeout=30, headers=headers
        )

    return run


def hostile_inputs(url: str, admin: str, tenant: str) -> None:
    """Bodies and parameters no client should send; none may be answered 5xx."""
    auth = {"Authorization": f"Bearer {admin}", "Content-Type": "application/json"}
    nested, huge = b"[" * 100_000, json.dumps({"name": "x", "pad": "y" * (3 << 20)}).encode()
    writes = [
        ("POST", "/api/v1/agent/join/"),
        ("POST", "/api/v1/namespaces/team-a/computedomains/"),
        ("PATCH", "/api/v1/namespaces/team-a/quota/"),
        ("POST", "/api/v1/tokens/"),
        ("POST", "/api/v1/subscriptions/"),
        ("POST", "/api/v1/maintenance/"),
    ]
    bodies = [
        nested,
        b"{" * 50_000,
        huge,
        b"\xff\xfe\x00",
        b"null",
        b"[]",
        b'"x"',
        b"1e999",
        b'{"a": NaN}',
        json.dumps({"metadata": {"name": "../../etc"}}).encode(),
    ]
    with httpx.Client(base_url=url, timeout=60) as client:
        for method, path in writes:
            for body in bodies:
                hit(client.request(method, path, content=body, headers=auth), bad_input=True)
        domain = "/api/v1/namespaces/team-a/computedomains/"
        odd = [
            {"metadata": {"name": "x"}, "spec": {"numNodes": "3"}},
            {"metadata": {"name": "x"}, "spec": {"numNodes": -1}},
            {"metadata": {"name": "x"}, "spec": {"numNodes": 10**30}},
            {"metadata": {"name": "x" * 5000}, "spec": {"numNodes": 1}},
            {"metadata": {"name": "x'; DROP TABLE x;--"}, "spec": {"numNodes": 1}},
            {"metadata": {"name": "x\u0000y"}, "spec": {"numNodes": 1}},
            {"metadata": {"name": "x"}, "spec": {"numNodes": 1}, "admin": True},
            {"metadata": {"name": "x", "namespace": "team-b"}, "spec": {"numNodes": 1}},
            {"metadata": {"name": "x"}, "spec": {"numNodes": 1, "lifetime": "99999999h"}},
        ]
        tenant_auth = {"Authorization": f"Bearer {tenant}"}
        for body in odd:
            hit(client.post(domain, json=body, headers=tenant_auth), bad_input=True)
        for query in [
            "limit=-1",
            "limit=10000000000",
            "offset=-1",
            "offset=1e9",
            "limit=%00",
            "ordering=password",
            "namespace=../",
            "limit=1&limit=2",
        ]:
            for path in ["/api/v1/events/", "/api/v1/nodes/", "/api/v1/namespaces/"]:
                hit(client.get(f"{path}?{query}", headers=tenant_auth), bad_input=True)
        for path in [
            "/api/v1/nodes/..%2f..%2fetc/",
            "/api/v1/namespaces/%00/",
            "/api/v1/" + "a" * 9000,
            "/django-admin/../../",
            "/static/../portal/settings.py",
        ]:
            hit(client.get(path, headers=tenant_auth), bad_input=True)
        for header in ["Bearer", "Bearer a b", "Basic YTpi", "Node x", "Bearer " + "x" * 10000]:
            hit(client.get("/api/v1/racks/", headers={"Authorization": header}), bad_input=True)


def isolation(url: str, alice: str, bob: str) -> int:
    """Bob (team-b) reaching for team-a's objects: every 2xx is a violation."""
    a, b = {"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"}
    violations = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        name = f"atk-{uuid.uuid4().hex[:6]}"
        made = hit(
            client.post(
                "/api/v1/namespaces/team-a/computedomains/",
                json={"metadata": {"name": name}, "spec": {"numNodes": 1}},
                headers=a,
            )
        )
        mine = hit(client.get("/api/v1/tokens/", headers=a)).json()["results"]
        base = f"/api/v1/namespaces/team-a/computedomains/{name}"
        tries = [
            ("GET", "/api/v1/namespaces/team-a/"),
            ("GET", "/api/v1/namespaces/team-a/quota/"),
            ("GET", "/api/v1/namespaces/team-a/computedomains/"),
            ("GET", f"{base}/"),
            ("GET", f"{base}/manifests/"),
            ("GET", f"{base}/events/"),
            ("DELETE", f"{base}/"),
            ("POST", f"{base}/extend/"),
            ("GET", "/api/v1/namespaces/team-a/members/"),
            ("PATCH", "/api/v1/namespaces/team-a/quota/"),
            *[("DELETE", f"/api/v1/tokens/{t['id']}/") for t in mine[:3]],
        ]
        for method, path in tries:
            body = {"by": "1h"} if path.endswith("extend/") else {"maxGpus": 1000}
            resp = hit(
                client.request(
                    method, path, headers=b, json=body if method in ("POST", "PATCH") else None
                )
            )
            if resp.status_code < 300:
                violations += 1
                print(f"  isolation: bob {method} {path} -> {resp.status_code}")
        lists = [
            "/api/v1/namespaces/",
            "/api/v1/events/",
            "/api/v1/approvals/",
            "/api/v1/notifications/",
            "/api/v1/tokens/",
        ]
        for path in lists:
            text = hit(client.get(f"{path}?limit=1000", headers=b)).text
            if "team-a" in text or name in text:
                violations += 1
                print(f"  isolation: bob's {path} shows team-a")
        if made.status_code == 201:
            hit(client.delete(f"{base}/", headers=a))
    return violations


def quota_race(url: str, bob: str, racers: int = 20) -> int:
    """`racers` concurrent one-tray requests in team-b; domains past its quota are overruns."""
    auth = {"Authorization": f"Bearer {bob}"}
    quota = hit(httpx.get(f"{url}/api/v1/namespaces/team-b/quota/", headers=auth)).json()
    prefix = f"race-{uuid.uuid4().hex[:4]}"

    def request(i: int) -> httpx.Response:
        body = {"metadata": {"name": f"{prefix}-{i}"}, "spec": {"numNodes": 1}}
        return httpx.post(
            f"{url}/api/v1/namespaces/team-b/computedomains/", json=body, headers=auth, timeout=60
        )

    with concurrent.futures.ThreadPoolExecutor(racers) as pool:
        answers = [hit(r) for r in pool.map(request, range(racers))]
    listed = hit(
        httpx.get(f"{url}/api/v1/namespaces/team-b/computedomains/?limit=1000", headers=auth)
    ).json()["results"]
    live = [d for d in listed if d["status"]["phase"] not in ("Released", "Failed")]
    limit = quota.get("maxDomains")
    overrun = max(0, len(live) - limit) if limit is not None else 0
    print(
        f"  quota race: {Counter(r.status_code for r in answers)}; "
        f"{len(live)} live in team-b, quota {limit}"
    )
    for r in answers:
        if r.status_code == 201:
            name = r.json()["metadata"]["name"]
            hit(
                httpx.delete(f"{url}/api/v1/namespaces/team-b/computedomains/{name}/", headers=auth)
            )
    return overrun


def sign_in_attacks(url: str, password: str, tenant: str) -> list[tuple[str, bool]]:
    findings = []
    spoof = lambda: {"X-Forwarded-For": f"198.51.100.{uuid.uuid4().int % 250 + 1}"}  # noqa: E731
    for i in range(25):
        hit(sign_in(url, "operator", f"guess-{i}", "/django-admin/login/", headers=spoof())[1])
    _, last = sign_in(url, "operator", password, "/django-admin/login/", headers=spoof())
    findings.append(
        ("admin form: 25 wrong passwords, then the right one refused", last.status_code != 302)
    )
    for i in range(30):
        hit(sign_in(url, "alice", f"guess-{i}")[1])
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    _, victim = sign_in(url, "alice", password, transport=transport)
    findings.append(("victim signs in from elsewhere after 30 guesses", victim.status_code == 302))
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(40):
            hit(client.get("/api/v1/racks/", headers={"Authorization": f"Bearer dpt_{i:06d}x"}))
        ok = hit(client.get("/api/v1/racks/", headers={"Authorization": f"Bearer {tenant}"}))
    findings.append(
        ("a valid token works after 40 bad ones from its address", ok.status_code == 200)
    )
    return findings


def takeover(url: str, join_token: str, operator: str) -> tuple[str, bool]:
    with httpx.Client(base_url=url, timeout=30) as client:
        nodes = hit(
            client.get("/api/v1/nodes/?limit=1000", headers={"Authorization": f"Bearer {operator}"})
        ).json()["results"]
        live = next((n for n in nodes if n.get("lastHeartbeat")), nodes[0])
        resp = hit(
            client.post(
                "/api/v1/agent/join/", json={"join_token": join_token, "hostname": live["hostname"]}
            )
        )
    return (
        f"join token re-registers {live['hostname']} (agent alive): {resp.status_code}",
        resp.status_code != 201,
    )


def forged_service_account_token(url: str, operator: str) -> tuple[str, bool]:
    """A made-up Kubernetes service-account token (a JWT for the portal's audience, bound to
    a live tray's node, signed by nobody) presented instead of the join token."""
    import base64

    with httpx.Client(base_url=url, timeout=30) as client:
        nodes = hit(
            client.get("/api/v1/nodes/?limit=1000", headers={"Authorization": f"Bearer {operator}"})
        ).json()["results"]
        live = next((n for n in nodes if n.get("lastHeartbeat")), nodes[0])
        claims = {"aud": ["domain-portal"], "sub": "system:serviceaccount:x:agent",
                  "kubernetes.io": {"node": {"name": live["hostname"]}}}  # fmt: skip
        part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        body = {"service_account_token": f"eyJhbGciOiJSUzI1NiJ9.{part}.c2ln",
                "hostname": live["hostname"]}  # fmt: skip
        resp = hit(client.post("/api/v1/agent/join/", json=body), bad_input=True)
    return (
        f"forged service-account token registers {live['hostname']}: {resp.status_code}",
        resp.status_code in (400, 403),
    )


def rogue_tray(url: str, join_token: str, operator: str) -> tuple[str, bool]:
    """A machine nobody racked, holding the fleet's join token, joins under a made-up name:
    it may wait for an operator, never be offered to tenants."""
    hostname = f"rogue-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=url, timeout=30) as client:
        body = {"join_token": join_token, "hostname": hostname, "ip": "127.0.250.1"}
        joined = hit(client.post("/api/v1/agent/join/", json=body))
        nodes = hit(
            client.get("/api/v1/nodes/?limit=1000", headers={"Authorization": f"Bearer {operator}"})
        ).json()["results"]
    state = next((n.get("state") for n in nodes if n["hostname"] == hostname), None)
    return (
        f"an unknown tray joins ({joined.status_code}) and waits as {state!r}",
        joined.status_code >= 400 or state == "pending",
    )


def token_family(url: str, tenant: str) -> list[tuple[str, bool]]:
    """Tokens minted with a token: capped at the parent's expiry, revoked with it."""
    findings = []
    with httpx.Client(base_url=url, timeout=30) as client:
        parent = hit(
            client.post(
                "/api/v1/tokens/",
                json={"name": "attack-parent", "expiresInDays": 1},
                headers={"Authorization": f"Bearer {tenant}"},
            )
        ).json()
        child = hit(
            client.post(
                "/api/v1/tokens/",
                json={"name": "attack-child", "expiresInDays": 365},
                headers={"Authorization": f"Bearer {parent['token']}"},
            )
        ).json()
        findings.append(
            (
                "a child token asking for a year expires with its one-day parent",
                child.get("expiresAt") is not None and child["expiresAt"] <= parent["expiresAt"],
            )
        )
        hit(
            client.delete(
                f"/api/v1/tokens/{parent['id']}/", headers={"Authorization": f"Bearer {tenant}"}
            )
        )
        after = hit(
            client.get("/api/v1/namespaces/", headers={"Authorization": f"Bearer {child['token']}"})
        )
    findings.append(
        (f"the child of a revoked token is refused: {after.status_code}", after.status_code == 401)
    )
    return findings


def oversized_heads(url: str) -> list[tuple[str, bool]]:
    """A request line or headers far past any real client's are refused before Django."""
    with httpx.Client(base_url=url, timeout=30) as client:
        long_url = hit(client.get("/api/v1/racks/?q=" + "a" * 20_000), bad_input=True)
        fat = hit(client.get("/api/v1/racks/", headers={"X-Pad": "b" * 70_000}), bad_input=True)
    return [
        (f"a 20 kB request line: {long_url.status_code}", long_url.status_code == 414),
        (f"70 kB of headers: {fat.status_code}", fat.status_code == 431),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--join-token", default="dpj_demo-join-token")
    parser.add_argument("--examples", type=int, default=10, help="schemathesis, per operation")
    parser.add_argument(
        "--agent-root",
        type=Path,
        default=Path("var/agents"),
        help="the demo's agents' roots (a compromised tray's node token)",
    )
    args = parser.parse_args()
    url = args.url.rstrip("/")
    tokens = {u: api_token(url, u, args.password) for u in ("alice", "bob", "operator", "admin")}
    print("schemathesis (every check; tenant, operator, admin) …")
    failures = fuzz(url, {k: tokens[k] for k in ("alice", "operator", "admin")}, args.examples)
    print("hostile inputs …")
    hostile_inputs(url, tokens["admin"], tokens["alice"])
    print("isolation …")
    violations = isolation(url, tokens["alice"], tokens["bob"])
    print("quota race …")
    overruns = quota_race(url, tokens["bob"])
    print("sign-in, tokens, join token, rogue tray, token family, oversized heads …")
    findings = sign_in_attacks(url, args.password, tokens["alice"])
    findings.append(takeover(url, args.join_token, tokens["operator"]))
    findings.append(forged_service_account_token(url, tokens["operator"]))
    findings.append(rogue_tray(url, args.join_token, tokens["operator"]))
    findings.extend(token_family(url, tokens["alice"]))
    findings.extend(oversized_heads(url))
    findings.extend(attack_limits.run(url, tokens, args.password, args.agent_root, hit))
    print()
    print(f"requests tried        {COUNT['requests']}")
    print(f"bad inputs tried      {COUNT['bad inputs']}")
    print(f"5xx seen              {COUNT['5xx']}")
    print(f"schemathesis failures {failures}")
    print(f"isolation violations  {violations}")
    print(f"quota overruns        {overruns}")
    for text, held in findings:
        print(f"{'held  ' if held else 'FAILED'} {text}")
    bad = COUNT["5xx"] or failures or violations or overruns or not all(h for _, h in findings)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
