"""What a release reads: one version for the portal, its images and the chart's appVersion;
images that say what they were built from; a written way to cut one."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from domain_portal import __version__

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/domain-portal/Chart.yaml"
DOCKERFILE = ROOT / "deploy/Dockerfile"


def test_the_charts_app_version_is_the_portals_version():
    assert str(yaml.safe_load(CHART.read_text())["appVersion"]) == __version__


def test_both_images_carry_oci_labels_from_the_build():
    text = DOCKERFILE.read_text()
    base = text[text.index("FROM ${PYTHON_IMAGE} AS base") : text.index("ENV ")]
    labels = dict(re.findall(r"(org\.opencontainers\.image\.[a-z.]+)=\"([^\"]+)\"", base))
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.created"] == "${CREATED}"
    assert labels["org.opencontainers.image.base.name"] == "${PYTHON_IMAGE}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    # every later stage builds on `base`, so the agent and the portal image both carry them
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", text, flags=re.M)
    assert [name for _, name in stages] == ["base", "agent-deps", "agent", "portal"]
    assert all(parent == "base" for parent, _ in stages[1:])
    # the base stage sees the pinned name it was given (ARG before FROM is out of scope)
    assert "ARG PYTHON_IMAGE\n" in base


def test_the_release_procedure_tags_pins_the_base_and_builds_both_architectures():
    manual = (ROOT / "docs/operations.md").read_text()
    release = manual[manual.index("## Releasing") : manual.index("## Values reference")]
    assert "git tag -a v" in release
    assert "imagetools inspect python:3.11-slim-bookworm" in release
    assert "PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:" in release
    assert "linux/amd64,linux/arm64" in release and "--target agent" in release
    assert "helm package" in release


SCRIPT = ROOT / "scripts/release_images.py"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def release_images(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--registry", "registry.example.com/gpu", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_the_release_builds_both_images_for_both_architectures_on_the_pinned_base():
    run = release_images("--base-digest", DIGEST, "--dry-run", "--allow-untagged")
    assert run.returncode == 0, run.stderr
    portal, agent = (shlex.split(line) for line in run.stdout.splitlines())
    revision = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    for argv, image in ((portal, "domain-portal"), (agent, "domain-portal-agent")):
        assert argv[:3] == ["docker", "buildx", "build"]
        assert argv[argv.index("--platform") + 1] == "linux/amd64,linux/arm64"
        args = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--build-arg")
        assert args["PYTHON_IMAGE"] == f"python:3.11-slim-bookworm@{DIGEST}"
        assert args["VERSION"] == __version__
        assert args["REVISION"] == revision
        assert argv[argv.index("-t") + 1] == f"registry.example.com/gpu/{image}:{__version__}"
        assert argv[-2:] == ["--push", "."]
    assert "--target" not in portal
    assert agent[agent.index("--target") + 1] == "agent"


def test_a_release_refuses_a_malformed_digest_naming_the_option():
    run = release_images("--base-digest", "sha256:short", "--dry-run", "--allow-untagged")
    assert run.returncode == 2
    assert "--base-digest: expected sha256: and 64 lowercase hex digits" in run.stderr
    assert run.stdout == ""


def test_a_release_is_built_only_from_its_tag(tmp_path):
    """In a clone of this commit: refused (and nothing built) until HEAD carries the
    release's tag, then built."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    git = ["git", "-C", str(clone), "-c", "user.name=r", "-c", "user.email=r@example.com"]
    subprocess.run([*git, "tag", "-d", f"v{__version__}"], capture_output=True)
    script = [sys.executable, str(clone / "scripts/release_images.py"), "--registry", "r.example"]
    run = subprocess.run([*script, "--base-digest", DIGEST, "--dry-run"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2
    assert f"HEAD is not tagged v{__version__}" in run.stderr
    assert run.stdout == ""
    subprocess.run([*git, "tag", "-a", f"v{__version__}", "-m", "release"], check=True)
    run = subprocess.run([*script, "--base-digest", DIGEST, "--dry-run"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 2
