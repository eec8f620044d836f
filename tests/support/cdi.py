"""CDI spec files judged by CDI's own rules, and a resolver that finds a fully qualified
device the way a runtime does.

- The JSON Schema the Container Device Interface publishes (`schema/schema.json` and its
  `defs.json`), read at test time from CDI's Go module as the Go toolchain downloads it
  (pinned below with its checksum; nothing of it is copied here). That is the module's
  last release under its former path, the last that carries the schema: later releases keep
  it in a module of its own that the Go module proxy does not serve.
- The rules CDI's library applies when it parses a spec (pkg/parser: the vendor, class and
  device names; specs-go: a `cdiVersion` it knows), which the schema leaves out. The
  newest rule, the oldest `cdiVersion` a spec's contents allow, is the agent's own
  `nodeagent.channels.cdi_version` (tests/nodeagent/test_pieces.py checks it against CDI's
  table); the real runtime judges it too (tests/kube/test_real_node.py: containerd).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

SCHEMA_MODULE = "github.com/container-orchestrated-devices/container-device-interface"
SCHEMA_VERSION = "v0.6.2"
SCHEMA_SUM = "h1:R8337pJXejl0wIibEpU6frzfOXD4rTvpmLu7a9VqqzQ="
# The spec versions CDI's library (v1.0) reads.
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0")

# pkg/parser/parser.go: a vendor or a class starts with a letter, then letters, digits,
# '_', '-' and '.', and ends with a letter or a digit; a device name the same, but may also
# start with a digit and hold ':'.
_VENDOR_OR_CLASS = r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
_KIND = re.compile(rf"^{_VENDOR_OR_CLASS}/{_VENDOR_OR_CLASS}$")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


@functools.cache
def _schema_validator() -> jsonschema.protocols.Validator:
    if shutil.which("go") is None:
        pytest.skip("CDI's JSON Schema is read from its Go module: go is not on PATH")
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{SCHEMA_MODULE}@{SCHEMA_VERSION}"],
        capture_output=True, text=True, cwd=tempfile.gettempdir(), check=False,
        env={**os.environ, "GOFLAGS": ""},
    )  # fmt: skip
    info = json.loads(done.stdout or "{}")
    if info.get("Error") or not info.get("Dir"):
        raise AssertionError(f"{SCHEMA_MODULE}@{SCHEMA_VERSION}: {info} {done.stderr}")
    if info.get("Sum") != SCHEMA_SUM:
        raise AssertionError(f"{SCHEMA_MODULE}@{SCHEMA_VERSION} has checksum {info.get('Sum')}")
    schema_dir = Path(info["Dir"]) / "schema"
    defs = json.loads((schema_dir / "defs.json").read_text())
    schema = json.loads((schema_dir / "schema.json").read_text())
    resource = Resource.from_contents(defs, default_specification=DRAFT7)
    registry: Registry[Any] = Registry().with_resource("defs.json", resource)
    return jsonschema.Draft7Validator(schema, registry=registry)


def library_errors(spec: dict[str, Any]) -> list[str]:
    """What CDI's library refuses in a spec that its schema lets through."""
    errors = []
    if spec.get("cdiVersion") not in KNOWN_VERSIONS:
        errors.append(f"cdiVersion {spec.get('cdiVersion')!r} is not one CDI knows")
    if not _KIND.match(str(spec.get("kind", ""))):
        errors.append(f"kind {spec.get('kind')!r} is not vendor/class")
    devices = spec.get("devices") or []
    if not devices:
        errors.append("no devices")
    for device in devices:
        if not _NAME.match(str(device.get("name", ""))):
            errors.append(f"device name {device.get('name')!r} is invalid")
    return errors


def assert_valid_cdi(spec: dict[str, Any]) -> None:
    """The spec passes CDI's published schema and its library's parse-time rules."""
    _schema_validator().validate(spec)
    errors = library_errors(spec)
    assert not errors, f"CDI refuses the spec: {errors}"


def resolve(cdi_dirs: list[Path], device_id: str) -> dict[str, Any]:
    """The device a runtime would apply for `vendor/class=name`, from every spec file in the
    directories; a device defined twice is an error, as the spec says."""
    kind, _, name = device_id.partition("=")
    found = []
    for directory in cdi_dirs:
        for path in sorted(directory.glob("*.json")) if directory.exists() else []:
            spec = json.loads(path.read_text())
            assert_valid_cdi(spec)
            if spec["kind"] == kind:
                found += [d for d in spec["devices"] if d["name"] == name]
    assert len(found) == 1, f"{device_id}: {len(found)} definitions in {cdi_dirs}"
    return found[0]
