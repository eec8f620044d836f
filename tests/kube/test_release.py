"""What a release reads: one version for the portal, its images and the chart's appVersion;
images that say what they were built from; a written way to cut one."""

from __future__ import annotations

import re
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
