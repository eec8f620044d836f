"""With DEBUG off, pages name their static files by the hashed names `collectstatic`
records; without them every page would be a 500, so the server refuses to start and says
what to run (make demo and the image run it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from testbed.processes import ROOT
from tests.support.staticfiles import collected_static

PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "debug-off-test-" + "k" * 40,
    "ALLOWED_HOSTS": "testserver,127.0.0.1",
}


def production_env(static_root: Path) -> dict[str, str]:
    """The environment of a production process: not the test settings."""
    env = {k: v for k, v in os.environ.items() if k != "PORTAL_TESTING"}
    return {**env, **PRODUCTION_ENV, "STATIC_ROOT": str(static_root)}


def test_the_server_refuses_to_start_with_debug_off_and_nothing_collected(tmp_path):
    started = subprocess.run(
        [sys.executable, "-c", "import portal.asgi"],
        cwd=ROOT,
        env=production_env(tmp_path / "static"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode != 0
    assert "static files were not collected" in started.stderr
    assert "collectstatic" in started.stderr


@pytest.fixture
def collected(settings):
    """DEBUG off, the production storage, and `collectstatic` run as make demo runs it."""
    root = Path(collected_static())
    settings.DEBUG = False
    settings.STATIC_ROOT = root
    settings.WHITENOISE_USE_FINDERS = False
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    return root


PAGES = {
    "operator": ["/fabric/", "/fabric/domains/", "/fabric/channels/", "/fabric/maintenance/"],
    "tenant": ["/ns/team-a/", "/ns/team-a/request/", "/tokens/", "/notifications/"],
    "admin": ["/manage/quotas/", "/manage/approvals/", "/manage/namespaces/", "/manage/audit/"],
}


def test_every_page_renders_with_debug_off_once_static_files_are_collected(
    collected, tenant_a, operator, admin, topology
):
    users = {"operator": operator, "tenant": tenant_a, "admin": admin}
    node = topology.nodes.order_by("slot").first()
    pages = {
        **PAGES,
        "trays": [f"/fabric/racks/{topology.name}/", f"/fabric/nodes/{node.hostname}/"],
    }
    users["trays"] = operator
    anonymous = Client().get("/login/", secure=True)
    assert anonymous.status_code == 200
    for role, paths in pages.items():
        client = Client()
        client.force_login(users[role])
        for path in paths:
            page = client.get(path, secure=True)
            assert page.status_code == 200, (role, path, page.status_code)
            names = re.findall(r"/static/([\w./-]+\.(?:css|js))", page.content.decode())
            assert names, (role, path)
            for name in names:  # hashed (portal.1a2b3c4d5e6f.css) and there to serve
                assert re.search(r"\.[0-9a-f]{12}\.(css|js)$", name), name
                assert (collected / name).is_file(), name


def test_the_system_check_names_the_missing_collectstatic(settings, tmp_path):
    from portal.web.checks import static_manifest_check

    settings.STATIC_ROOT = tmp_path / "empty"
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    (problem,) = static_manifest_check(None)  # `manage.py check --deploy` runs it
    assert problem.id == "portal_web.E001"
    assert "collectstatic" in problem.msg
