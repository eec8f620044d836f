"""PostgreSQL away (docs/reliability.md): 503 with Retry-After in the API's error shape while
it is down, never a 500, and no request fails on a pooled connection the restart killed.

A private PostgreSQL cluster (its own initdb, migrated here) serves a real server, worker and
beat. The server's connection pool is filled (every connection in use at once), PostgreSQL
is restarted the way an operator or a failover does (`pg_ctl -m fast`: "terminating
connection due to administrator command" on every session), and the next requests, as many
at once as the pool has connections, answer 200 or 503, never 500; once it is up they all
answer 200, and the worker places a domain on its own pool's fresh connections.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import threading
from collections import Counter

import httpx
import pytest

from testbed.processes import (
    ROOT,
    process_env,
    running,
    start_beat,
    start_server,
    start_worker,
    wait_until,
)
from testbed.services import PrivatePostgres

pytestmark = [pytest.mark.e2e]

POOL = 6  # connections per process (DB_POOL_MAX)

SEED = """
from domains.audit.events import Actor
from domains.tenancy.tokens import token_create
from testbed import factories
factories.make_racks("4", ip_prefix=factories.tray_ip_prefix(12))
ns = factories.make_namespace("pgaway", max_gpus=72, max_nodes=18, max_domains=8)
user = factories.make_user("pgaway-tenant")
factories.add_member(user, ns, "member")
writes = factories.make_namespace(
    "pgwrites", max_gpus=10**5, max_nodes=10**4, max_domains=10**4, max_nodes_per_domain=4
)
factories.add_member(user, writes, "member")
print(token_create(actor=Actor.for_user(user), user=user, name="pgaway")[1])
"""

AUDIT = """
import json
from collections import Counter
from domains.audit.models import Event
from domains.computedomains.models import ComputeDomain
ns = "pgwrites"
print(json.dumps({
    "domains": list(ComputeDomain.objects.filter(namespace__name=ns).values_list("name", "phase")),
    "events": Counter(
        f"{verb} {name}"
        for verb, name in Event.objects.filter(
            verb__in=["domain.requested", "domain.released"], domain__namespace__name=ns
        ).values_list("verb", "domain__name")
    ),
}))
"""


def manage(url: str, *args: str) -> str:
    env = process_env(DATABASE_URL=url)
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def private_pg():
    with PrivatePostgres() as pg:
        pg.create_database("portal")
        url = pg.url("portal")
        manage(url, "migrate", "--no-input", "-v", "0")
        token = manage(url, "shell", "-c", SEED).strip().splitlines()[-1]
        yield pg, url, token


def burst(api: httpx.Client, n: int, path: str = "/computedomains/") -> list[int]:
    """n requests at once: with n ≥ the pool size, every pooled connection serves one."""
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: _status(api, path), range(n)))


def _status(api: httpx.Client, path: str) -> int:
    resp = api.get(path)
    if resp.status_code == 503:
        assert resp.headers["Retry-After"].isdigit()
        assert resp.json()["code"] == "unavailable"
    return resp.status_code


def test_a_postgres_restart_answers_200_or_503_never_500(private_pg):
    pg, url, token = private_pg
    env = {
        "DATABASE_URL": url,
        "DB_POOL_MAX": str(POOL),
        "DB_POOL_TIMEOUT": "3",  # a request waits at most this long for PostgreSQL
        "PORTAL_HEARTBEAT_STALE_S": "3600",  # no agents: the seeded heartbeats must hold
    }
    server, base = start_server(**env)
    worker = start_worker(**env)
    beat = start_beat(**env)
    limits = httpx.Limits(max_connections=4 * POOL)
    with (
        running(beat, worker, server),
        httpx.Client(
            base_url=f"{base}/api/v1/namespaces/pgaway",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            limits=limits,
        ) as api,
    ):
        assert burst(api, 2 * POOL) == [200] * (2 * POOL)  # the pool is full and warm

        pg.restart()  # every pooled connection is now dead
        after = burst(api, 2 * POOL) + burst(api, 2 * POOL)
        assert set(after) <= {200, 503}, after  # the policy: never a 500
        # PostgreSQL is up again when restart() returns: the pool's health check replaces
        # each dead connection, so not even a 503 (with DB_POOL_CHECK=0 these are 503s).
        assert after == [200] * (4 * POOL), after

        pg.stop()  # away for good: 503, in the API's shape, with Retry-After
        down = burst(api, POOL)
        assert down == [503] * POOL, down
        page = httpx.get(f"{base}/login/", timeout=30)
        assert page.status_code in (200, 503)  # the sign-in page needs no database
        wrong = httpx.post(
            f"{base}/api/v1/namespaces/pgaway/computedomains/",
            json={"metadata": {"name": "x"}, "spec": {"numNodes": 1}},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert wrong.status_code == 503, wrong.text
        pg.start()
        wait_until(lambda: burst(api, POOL) == [200] * POOL, 30, what="PostgreSQL back")

        # The worker's and beat's connections died too: a new domain is still placed.
        created = api.post(
            "/computedomains/", json={"metadata": {"name": "after"}, "spec": {"numNodes": 2}}
        )
        assert created.status_code == 201, created.text
        wait_until(
            lambda: api.get("/computedomains/after/").json()["status"]["phase"] == "Forming",
            60,
            what="placed after the restart",
        )
    for proc in (server, worker, beat):
        assert "Internal Server Error" not in proc.log(), proc.log()[-3000:]
    assert "Service Unavailable: /api/v1/" in server.log()  # logged, as 503s are


def test_writes_in_flight_through_a_postgres_restart_answer_once_never_5xx(private_pg):
    """Tenants' writes (POST a domain, DELETE it) run non-stop from more threads than the pool
    has connections while PostgreSQL is restarted twice: each is answered 201 or 202 (never
    503, never 409 "exists" from a second run of a committed write), each domain exists
    once, requested once and released once."""
    pg, url, token = private_pg
    env = {
        "DATABASE_URL": url,
        "DB_POOL_MAX": str(POOL),
        "DB_POOL_TIMEOUT": "10",
        "PORTAL_HEARTBEAT_STALE_S": "3600",
    }
    server, base = start_server(**env)
    answers: list[tuple[str, int, str]] = []
    stop = threading.Event()

    def writer(i: int) -> None:
        keyed = i % 2 == 0  # half send an Idempotency-Key, half rely on the receipt alone
        with httpx.Client(
            base_url=f"{base}/api/v1/namespaces/pgwrites",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        ) as api:
            n = 0
            while not stop.is_set():
                n += 1
                name = f"w{i}-{n}"
                key = {"Idempotency-Key": f"{name}-create"} if keyed else {}
                body = {"metadata": {"name": name}, "spec": {"numNodes": 1}}
                r = api.post("/computedomains/", json=body, headers=key)
                answers.append(("POST", r.status_code, f"{name} {r.text[:200]}"))
                key = {"Idempotency-Key": f"{name}-release"} if keyed else {}
                r = api.delete(f"/computedomains/{name}", headers=key)
                answers.append(("DELETE", r.status_code, f"{name} {r.text[:200]}"))

    def answered_more(n: int) -> None:
        start = len(answers)
        wait_until(lambda: len(answers) >= start + n, 120, what=f"{n} more answers")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(POOL + 2)]
    with running(server):
        for t in threads:
            t.start()
        try:
            answered_more(4 * POOL)
            pg.restart(down_s=1.0)
            answered_more(4 * POOL)
            pg.restart(down_s=0.3)
            answered_more(4 * POOL)
        finally:
            stop.set()
            for t in threads:
                t.join(120)
    wrong = [a for a in answers if a[1] != {"POST": 201, "DELETE": 202}[a[0]]]
    assert not wrong, wrong[:10]
    log = server.log()
    assert "the database went away" in log  # the restarts did catch writes in flight
    assert "Internal Server Error" not in log and "Service Unavailable" not in log

    audit = json.loads(manage(url, "shell", "-c", AUDIT).strip().splitlines()[-1])
    names = [n for n, _ in audit["domains"]]
    posted = {a[2].split()[0] for a in answers if a[0] == "POST"}
    assert sorted(names) == sorted(posted)  # each once: no duplicate, none missing
    assert {phase for _, phase in audit["domains"]} == {"Released"}  # none half-made
    events = Counter(audit["events"])
    for name in posted:
        assert events[f"domain.requested {name}"] == 1, name
        assert events[f"domain.released {name}"] == 1, name
