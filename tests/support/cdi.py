"""A JSON Schema for CDI spec files, written for these tests from the Container Device
Interface specification (cncf-tags/container-device-interface, SPEC.md, "CDI JSON
Specification"), and a resolver that finds a fully qualified device the way a runtime does.

Only what the spec states is checked: `cdiVersion` (semver), `kind` (`vendor.prefix/name`,
the name at most 63 characters), at least one device, device names, and the fields and
types of `containerEdits` (env, deviceNodes, mounts, hooks, additionalGids); unknown fields
are refused, since a runtime's strict parser would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

_NAME = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KIND = rf"^{_DNS_SUBDOMAIN}/[A-Za-z0-9]([A-Za-z0-9_.-]{{0,61}}[A-Za-z0-9])?$"
_SEMVER = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$"
_STRINGS = {"type": "array", "items": {"type": "string"}}
_ANNOTATIONS = {"type": "object", "additionalProperties": {"type": "string"}}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_DEVICE_NODE = _closed(
    {
        "path": {"type": "string", "pattern": "^/"},
        "hostPath": {"type": "string", "pattern": "^/"},
        "type": {"enum": ["b", "c", "u", "p"]},
        "major": {"type": "integer", "minimum": 0},
        "minor": {"type": "integer", "minimum": 0},
        "fileMode": {"type": "integer", "minimum": 0, "maximum": 0o7777},
        "permissions": {"type": "string", "pattern": "^(r?w?m?|none)$"},
        "uid": {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
        "gid": {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
    },
    required=("path",),
)
_EDITS = _closed(
    {
        "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+=.*$"}},
        "deviceNodes": {"type": "array", "items": _DEVICE_NODE},
        "mounts": {
            "type": "array",
            "items": _closed(
                {
                    "hostPath": {"type": "string"},
                    "containerPath": {"type": "string"},
                    "type": {"type": "string"},
                    "options": _STRINGS,
                },
                required=("hostPath", "containerPath"),
            ),
        },
        "hooks": {
            "type": "array",
            "items": _closed(
                {
                    "hookName": {"type": "string"},
                    "path": {"type": "string", "pattern": "^/"},
                    "args": _STRINGS,
                    "env": _STRINGS,
                    "timeout": {"type": "integer", "exclusiveMinimum": 0},
                },
                required=("hookName", "path"),
            ),
        },
        "additionalGids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    }
)
CDI_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "CDI spec (written from SPEC.md for these tests)",
    **_closed(
        {
            "cdiVersion": {"type": "string", "pattern": _SEMVER},
            "kind": {"type": "string", "pattern": _KIND, "maxLength": 253 + 1 + 63},
            "annotations": _ANNOTATIONS,
            "devices": {
                "type": "array",
                "minItems": 1,
                "items": _closed(
                    {
                        "name": {"type": "string", "pattern": _NAME},
                        "annotations": _ANNOTATIONS,
                        "containerEdits": _EDITS,
                    },
                    required=("name", "containerEdits"),
                ),
            },
            "containerEdits": _EDITS,
        },
        required=("cdiVersion", "kind", "devices"),
    ),
}


def assert_valid_cdi(spec: dict[str, Any]) -> None:
    jsonschema.validate(spec, CDI_SCHEMA, cls=jsonschema.Draft202012Validator)


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
