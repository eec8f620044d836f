"""A SQL error is a bug, not an outage (docs/reliability.md).

A real server on a private PostgreSQL cluster answers a tray's desired-state read. When the
statement itself is wrong (here: a column the query names is gone, as after a migration that
did not run), the answer is one 500, logged once with the request id and never tried again;
only when the server is really gone is it 503 with Retry-After, the answer agents wait out.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import psycopg
import pytest

from domains.computedomains.models import ChannelAllocation
from testbed.processes import ROOT, process_env, running, start_server
from testbed.services import PrivatePostgres

pytestmark = [pytest.mark.e2e]

SEED = """
from domains.agents.joining import agent_join
from testbed import factories
from testbed.agents import ensure_join_token, node_facts
rack = factories.make_racks("2", ip_prefix=factories.tray_ip_prefix(13))[0]
node = rack.nodes.order_by("slot").first()
_, raw = agent_join(join_token=ensure_join_token(), facts=node_facts(node))
print(node.pk, raw)
"""


def manage(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=process_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def tray_on_private_pg():
    with PrivatePostgres() as pg:
        pg.create_database("portal")
        url = pg.url("portal")
        manage(url, "migrate", "--no-input", "-v", "0")
        node_id, token = manage(url, "shell", "-c", SEED).split()[-2:]
        yield pg, url, int(node_id), token


def failures(server, rid: str) -> list[str]:
    return [line for line in server.log().splitlines() if rid in line]


def test_a_refused_statement_answers_500_once_and_a_lost_server_503(tray_on_private_pg):
    pg, url, node_id, token = tray_on_private_pg
    table = ChannelAllocation._meta.db_table
    with psycopg.connect(url, autocommit=True) as conn:
        # The server refuses to wait on a lock for long: an OperationalError (55P03) that
        # says nothing about the connection.
        conn.execute("ALTER DATABASE portal SET lock_timeout = '300ms'")
    server, base = start_server(
        DATABASE_URL=url, DB_POOL_TIMEOUT="3", PORTAL_HEARTBEAT_STALE_S="3600"
    )
    desired = f"{base}/api/v1/agent/nodes/{node_id}/desired/"

    def read(rid: str) -> httpx.Response:
        headers = {"Authorization": f"Node {token}", "X-Request-ID": rid}
        return httpx.get(desired, headers=headers, timeout=30)

    with running(server):
        assert read("rid-healthy-0001").status_code == 200

        with psycopg.connect(url) as holder:
            holder.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
            locked = read("rid-locked-0001")
        assert locked.status_code == 500, locked.text
        assert locked.json()["code"] == "server_error"
        assert "Retry-After" not in locked.headers
        assert len(failures(server, "rid-locked-0001")) == 1  # logged once, with its id
        assert "LockNotAvailable" in server.log() or "lock timeout" in server.log()

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{table}" RENAME COLUMN "channel" TO "channel_gone"')
        broken = read("rid-broken-0001")
        assert broken.status_code == 500, broken.text
        assert len(failures(server, "rid-broken-0001")) == 1
        assert "ProgrammingError: column c.channel does not exist" in server.log()
        assert "lost the database" not in server.log()  # neither taken for an outage

        pg.stop()
        away = read("rid-away-0001")
        assert away.status_code == 503, away.text
        assert away.headers["Retry-After"].isdigit()
        assert away.json()["code"] == "unavailable"
        pg.start()  # the fixture stops it
