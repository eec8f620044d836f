"""A refused page costs one log line, not a traceback: with DEBUG off, a tenant asking for
pages they may not open (403) or that do not exist (404) used to log ~2 KB of traceback
each, so anyone signed in could fill the logs."""

from __future__ import annotations

import pytest

from tests.security.test_signin import PORTAL_LOGIN, sign_in, signed_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_tenants_refused_pages_log_one_line_each_and_no_traceback(http, server, tenant_a):
    assert signed_in(sign_in(http, PORTAL_LOGIN, "alice", tenant_a.raw_password))
    before = server.log()
    for path in ["/fabric/", "/fabric/nodes/nope/", "/manage/audit/", "/no-such-page/"] * 5:
        assert http.get(path).status_code in (403, 404), path
    added = server.log()[len(before) :]
    assert "Traceback" not in added, added[-3000:]
    assert added.count("Forbidden") >= 5  # still logged, one line each
