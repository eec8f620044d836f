"""Project habits that are easy to let slip: the lock covers pyproject.toml, the licence,
and SPDX headers on what is distributed on its own (the agent and the chart).

`make lock-check` (CI) re-resolves the lock; these offline checks catch the common slips
in any `make test` run."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.processes import ROOT

SPDX = "SPDX-License-Identifier: Apache-2.0"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pins(lock: str) -> dict[str, str]:
    text = (ROOT / "requirements" / lock).read_text()
    found = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9._-]+)==(\S+)", block)
        if match:
            assert "--hash=sha256:" in block, f"{match[1]} has no hash in {lock}"
            found[canonicalize_name(match[1])] = match[2]
    return found


@pytest.mark.parametrize(("lock", "groups"), [("main.txt", ["main"]), ("dev.txt", ["main", "dev"])])
def test_the_lock_pins_every_dependency_within_its_bounds(lock, groups):
    locked = pins(lock)
    wanted = list(PYPROJECT["project"]["dependencies"])
    if "dev" in groups:
        wanted += PYPROJECT["project"]["optional-dependencies"]["dev"]
    wanted += PYPROJECT["build-system"]["requires"]  # built with --no-build-isolation
    for line in wanted:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in requirements/{lock}: run `make lock`"
        assert req.specifier.contains(locked[name], prereleases=True), (
            f"requirements/{lock} pins {req.name}=={locked[name]} outside {req.specifier}"
        )


def test_main_and_dev_pin_the_same_versions():
    main, dev = pins("main.txt"), pins("dev.txt")
    assert {n: v for n, v in main.items() if dev.get(n) != v} == {}


def test_the_licence_is_apache_2():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_the_agent_and_the_chart_carry_spdx_headers():
    files = [
        *ROOT.glob("nodeagent/**/*.py"),
        *ROOT.glob("agentwire/*.py"),
        *ROOT.glob("nodeagent/emulator/bin/*"),
        ROOT / "domain_portal/__init__.py",
        *(ROOT / "deploy/helm/domain-portal/templates").iterdir(),
        ROOT / "deploy/helm/domain-portal/Chart.yaml",
        ROOT / "deploy/helm/domain-portal/values.yaml",
        ROOT / "deploy/helm/domain-portal/monitoring/alerts.yaml",
    ]
    missing = [
        str(f.relative_to(ROOT))
        for f in files
        if "__pycache__" not in f.parts and SPDX not in "".join(f.read_text().splitlines(True)[:3])
    ]
    assert missing == []
