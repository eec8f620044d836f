"""Project habits that are easy to let slip: the lock covers pyproject.toml, the licence,
and SPDX headers on what is distributed on its own (the agent and the chart).

`make lock-check` (CI) re-resolves the lock; these offline checks catch the common slips
in any `make test` run."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from testbed.processes import ROOT

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
        *ROOT.glob("testbed/emulator/bin/*"),
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


def size_limits() -> ModuleType:
    """scripts/check_limits.py, which CI runs (`make lint`)."""
    spec = importlib.util.spec_from_file_location("check_limits", ROOT / "scripts/check_limits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_app_module_is_over_450_lines_and_no_function_over_60():
    assert size_limits().breaches() == []


def test_the_size_check_names_a_long_module_and_a_long_function(tmp_path):
    limits = size_limits()
    long_function = "def f():\n" + "    x = 1\n" * 60
    (tmp_path / "domains").mkdir()
    (tmp_path / "domains/long.py").write_text(long_function + "\n\ny = 2\n" * 200)
    (tmp_path / "domains/migrations").mkdir()
    (tmp_path / "domains/migrations/0001_initial.py").write_text("x = 1\n" * 500)
    assert limits.breaches(tmp_path) == [
        "domains/long.py: 661 lines (at most 450)",
        "domains/long.py:1 f: 61 lines (at most 60)",
    ]


def test_ruff_holds_app_code_to_complexity_15():
    lint = PYPROJECT["tool"]["ruff"]["lint"]
    assert "C90" in lint["select"] and lint["mccabe"]["max-complexity"] == 15
    assert not any(
        rule.startswith("C90")
        for path, rules in lint["per-file-ignores"].items()
        if not path.startswith(("tests/", "bench/", "testbed/kube/"))
        for rule in rules
    )
