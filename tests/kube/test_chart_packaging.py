"""How the chart and the images are packaged: the agent image's dependencies (the agent's part
of the lock, without Django), the build context, and a chart version that moves whenever the
chart does."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/domain-portal"
sys.path.insert(0, str(ROOT / "deploy"))
import agent_requirements  # noqa: E402  (deploy/ is no package: a build-stage script)

sys.path.remove(str(ROOT / "deploy"))

LOCK = ROOT / "requirements/main.txt"
PORTAL_ONLY = {"django", "celery", "channels", "channels-redis", "djangorestframework",
               "uvicorn", "psycopg", "kombu", "whitenoise", "redis"}  # fmt: skip


def agent_lock() -> dict[str, agent_requirements.Pin]:
    pins = agent_requirements.agent_pins(agent_requirements.parse(LOCK.read_text()))
    return {pin.name: pin for pin in pins}


def test_the_agents_dependencies_hold_nothing_of_the_portal():
    chosen = agent_lock()
    assert set(chosen) >= agent_requirements.AGENT
    assert set(chosen) & PORTAL_ONLY == set()
    assert not any(name.startswith("django") for name in chosen)
    # every entry is the lock's own, hashes included, so pip --require-hashes installs it
    text = agent_requirements.render(list(chosen.values()))
    for pin in chosen.values():
        assert all(line in LOCK.read_text() for line in pin.lines)
        assert any("--hash=sha256:" in line for line in pin.lines), pin.name
    assert text.count("==") == len(chosen)


def test_the_agents_dependencies_are_closed_under_what_each_one_requires():
    """pip --require-hashes refuses a set missing any dependency: what each chosen package
    requires here (its installed metadata, markers of this platform) is chosen too."""
    chosen = agent_lock()
    for name in chosen:
        for spec in importlib.metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            assert agent_requirements.canonical(req.name) in chosen, f"{name} needs {req.name}"


def third_party_imports() -> set[str]:
    found: set[str] = set()
    for path in [*(ROOT / "nodeagent").rglob("*.py"), *(ROOT / "agentwire").rglob("*.py")]:
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    own = {"nodeagent", "agentwire", "domain_portal", "google"}  # google: protobuf's namespace
    return found - set(sys.stdlib_module_names) - own


def test_the_agent_list_is_what_the_agent_imports():
    distributions = importlib.metadata.packages_distributions()
    imported = {
        agent_requirements.canonical(dist)
        for module in third_party_imports()
        for dist in distributions[module]
    }
    assert imported | {"protobuf"} == agent_requirements.AGENT


def test_the_dockerfile_builds_an_agent_image_from_the_agents_part_of_the_lock():
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    stages = [line.split()[-1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert stages == ["base", "agent-deps", "agent", "portal"]  # portal: the default target
    agent = dockerfile[dockerfile.index("AS agent\n") : dockerfile.index("AS portal")]
    assert "COPY portal" not in agent and "COPY domains" not in agent
    assert "--require-hashes" in dockerfile and "deploy/agent_requirements.py" in dockerfile
    assert "org.opencontainers.image.version" in dockerfile
    assert "USER 10001" in dockerfile[dockerfile.index("AS portal") :]


def test_no_image_ships_the_stand_in_world():
    """The IMEX emulator, the dev services and the tests' world live in testbed/, which the
    build context leaves out and no stage copies; the agent's own packages hold none of it."""
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {"testbed", "tests", "bench"} <= ignored
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    assert "testbed" not in dockerfile and "emulator" not in dockerfile
    shipped = ["domain_portal", "agentwire", "nodeagent"]
    assert not [p for d in shipped for p in (ROOT / d).rglob("*") if "emulat" in p.name]


def test_the_build_context_leaves_out_the_virtualenv_and_local_state():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "var", "test-artifacts", "staticfiles"} <= ignored
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    copied = {
        part
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for part in line.split()[1:-1]
    }
    assert copied and not copied & ignored  # nothing the image needs is left out


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def chart_version(rev: str | None) -> str:
    text = (
        (CHART / "Chart.yaml").read_text()
        if rev is None
        else git("show", f"{rev}:{CHART.relative_to(ROOT)}/Chart.yaml")
    )
    return str(yaml.safe_load(text)["version"])


def test_a_chart_change_comes_with_a_new_chart_version():
    """The newest change to the chart (uncommitted, or else the last commit that touched
    it) carries another version than the chart had before it."""
    try:
        git("rev-parse", "--git-dir")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    path = str(CHART.relative_to(ROOT))
    if git("status", "--porcelain", "--", path).strip():
        changed, before = None, "HEAD"  # uncommitted: against the last commit
    else:
        last = git("log", "-1", "--format=%H", "--", path).strip()
        if not last:
            pytest.skip("the chart has no history here")
        changed, before = last, f"{last}^"
    try:
        previous = chart_version(before)
    except subprocess.CalledProcessError:
        if git("rev-parse", "--is-shallow-repository").strip() == "true":
            pytest.skip("shallow clone: the chart's previous version is not here")
        return  # the chart's first commit: nothing to compare with
    assert chart_version(changed) != previous, (
        f"deploy/helm changed ({changed or 'uncommitted'}) without a new version in "
        f"Chart.yaml (still {previous}): bump `version`"
    )
