"""Build and push a release's two images (portal and agent) for linux/amd64 and linux/arm64,
on a base pinned by digest.

    python scripts/release_images.py --registry registry.example.com            # build, push
    python scripts/release_images.py --registry r.example --dry-run             # print only
    python scripts/release_images.py --registry r.example --base-digest sha256:<64 hex>

The base (`python:3.11-slim-bookworm`) is named by tag in deploy/Dockerfile, because the
digest a tag points at moves with every Debian and CPython patch. A release takes the
digest the registry gives for the tag *now* (the index digest, which covers both
architectures), builds on `<tag>@<digest>` and records it in the images' OCI labels
(`org.opencontainers.image.base.name`), so the same release always rebuilds on the same
base. `--base-digest` names it instead of asking the registry (a rebuild of an older
release: take the digest from that image's label).

It refuses to build from a commit that is not the release's tag (`v<version>`) or from a
tree with uncommitted changes, unless `--allow-untagged` (a test build).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = "python:3.11-slim-bookworm"
PLATFORMS = "linux/amd64,linux/arm64"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# image name → Dockerfile target ("" = the last stage, the portal)
IMAGES = {"domain-portal": "", "domain-portal-agent": "agent"}


class ReleaseError(Exception):
    pass


def version() -> str:
    text = (ROOT / "domain_portal/__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, flags=re.M)
    if found is None:
        raise ReleaseError("domain_portal/__init__.py: no __version__")
    return found.group(1)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def check_release_commit(release: str) -> None:
    """HEAD is the annotated tag `v<release>` and nothing is left uncommitted."""
    if git("status", "--porcelain", "--untracked-files=no"):
        raise ReleaseError("the working tree has uncommitted changes: commit or stash them")
    tags = git("tag", "--points-at", "HEAD").split()
    if f"v{release}" not in tags:
        raise ReleaseError(
            f"HEAD is not tagged v{release} (tags here: {', '.join(tags) or 'none'}); "
            "tag the release first (docs/operations.md, Releasing)"
        )


def registry_digest(image: str) -> str:
    """The index digest the registry gives for `image` now."""
    try:
        out = subprocess.run(
            ["docker", "buildx", "imagetools", "inspect", image, "--format", "{{json .Manifest}}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except FileNotFoundError as exc:
        raise ReleaseError("docker is not installed: give --base-digest") from exc
    except subprocess.CalledProcessError as exc:
        message = f"docker buildx imagetools inspect {image}: {exc.stderr.strip()}"
        raise ReleaseError(message) from exc
    digest = str(json.loads(out).get("digest", ""))
    if not DIGEST.match(digest):
        raise ReleaseError(f"the registry gave no sha256 digest for {image}: {out[:200]!r}")
    return digest


def build_commands(
    *, registry: str, release: str, revision: str, created: str, base: str, push: bool = True
) -> list[list[str]]:
    """One `docker buildx build` per image, both platforms, the base pinned as given."""
    commands = []
    for name, target in IMAGES.items():
        argv = ["docker", "buildx", "build", "-f", "deploy/Dockerfile", "--platform", PLATFORMS]
        if target:
            argv += ["--target", target]
        for arg, value in (
            ("PYTHON_IMAGE", base),
            ("VERSION", release),
            ("REVISION", revision),
            ("CREATED", created),
        ):
            argv += ["--build-arg", f"{arg}={value}"]
        argv += ["-t", f"{registry.rstrip('/')}/{name}:{release}"]
        argv += ["--push", "."] if push else ["."]
        commands.append(argv)
    return commands


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", required=True, help="e.g. registry.example.com/team")
    parser.add_argument("--base-digest", default="", help="sha256:<64 hex> of the base's index")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    parser.add_argument("--no-push", action="store_true", help="build without pushing")
    parser.add_argument("--allow-untagged", action="store_true", help="a test build")
    args = parser.parse_args(argv)
    try:
        if args.base_digest and not DIGEST.match(args.base_digest):
            raise ReleaseError("--base-digest: expected sha256: and 64 lowercase hex digits")
        release = version()
        if not args.allow_untagged:
            check_release_commit(release)
        digest = args.base_digest or registry_digest(BASE)
        commands = build_commands(
            registry=args.registry,
            release=release,
            revision=git("rev-parse", "HEAD"),
            created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            base=f"{BASE}@{digest}",
            push=not args.no_push,
        )
    except ReleaseError as exc:
        print(f"release_images: {exc}", file=sys.stderr)
        return 2
    for command in commands:
        print(shlex.join(command), flush=True)
        if not args.dry_run:
            subprocess.run(command, cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
