"""The committed OpenAPI schema (docs/openapi.yaml): generate it as the portal serves it,
tell how far it drifted from the committed copy, and how much of it is described.

`manage.py openapi` rewrites the file; `manage.py openapi --check` (and the test suite)
fails with a readable diff while it differs from what the code generates."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from django.conf import settings
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.renderers import OpenApiYamlRenderer
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.validation import validate_schema

DIFF_LINES = 200  # of a drifted schema's diff: enough to see what moved


class SchemaWarnings(Exception):
    """The generator could not resolve part of the API (its warnings say which)."""


def schema_file() -> Path:
    return Path(settings.BASE_DIR) / "docs" / "openapi.yaml"


def generate() -> dict[str, Any]:
    """The schema `/api/v1/schema/` serves, validated against the OpenAPI 3 schema;
    any generator warning is an error, so nothing is documented by guesswork."""
    GENERATOR_STATS.reset()
    generator = spectacular_settings.DEFAULT_GENERATOR_CLASS(urlconf=None, api_version=None)
    schema: dict[str, Any] = generator.get_schema(request=None, public=True)
    problems = [*GENERATOR_STATS._warn_cache, *GENERATOR_STATS._error_cache]
    if problems:
        raise SchemaWarnings("\n".join(problems))
    validate_schema(schema)
    return schema


def render(schema: dict[str, Any]) -> str:
    text: bytes = OpenApiYamlRenderer().render(schema, renderer_context={})
    return text.decode()


def drift(committed: str, generated: str) -> str:
    """A unified diff from the committed file to the generated schema; empty when equal."""
    lines = difflib.unified_diff(
        committed.splitlines(keepends=True),
        generated.splitlines(keepends=True),
        fromfile="docs/openapi.yaml (committed)",
        tofile="docs/openapi.yaml (generated)",
    )
    diff = list(lines)
    if len(diff) > DIFF_LINES:
        diff = [*diff[:DIFF_LINES], f"… {len(diff) - DIFF_LINES} more lines\n"]
    return "".join(diff)


def description_coverage(schema: dict[str, Any]) -> tuple[int, int]:
    """(described, total) over every property of every component schema."""
    fields = [
        field
        for component in schema.get("components", {}).get("schemas", {}).values()
        for field in component.get("properties", {}).values()
    ]
    described = sum(1 for field in fields if field.get("description", "").strip())
    return described, len(fields)
