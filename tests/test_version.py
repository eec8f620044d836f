"""One version, written in domain_portal/__init__.py, everywhere it is shown or sent."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from django.test import Client

from domain_portal import __version__
from nodeagent.config import AGENT_VERSION
from testbed.processes import ROOT


def test_the_version_is_a_release_number_and_the_package_metadata_reads_it():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert version("domain-portal") == __version__  # pyproject's dynamic version


def test_the_chart_deploys_the_same_version():
    chart = yaml.safe_load((ROOT / "deploy/helm/domain-portal/Chart.yaml").read_text())
    assert chart["appVersion"] == __version__


def test_the_changelog_has_a_section_for_it():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(__version__)}\] - \d{{4}}-\d\d-\d\d$", changelog, re.M)
    assert "## [Unreleased]" in changelog


def test_the_agent_prints_it_and_sends_it_when_joining():
    out = subprocess.run(
        [sys.executable, "-m", "nodeagent", "--version"],
        capture_output=True,
        text=True,
        cwd=Path("/"),  # the installed package, not the checkout on sys.path
        timeout=30,
    )
    assert (out.returncode, out.stdout) == (0, f"nodeagent {__version__}\n")
    assert __version__ == AGENT_VERSION


@pytest.mark.django_db
def test_the_footer_and_healthz_show_it():
    page = Client().get("/login/").content.decode()
    assert f"Domain Portal {__version__}</footer>" in page
    assert Client().get("/healthz").json()["version"] == __version__
