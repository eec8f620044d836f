"""The OpenAPI schema as committed in docs/openapi.yaml: the same as the code generates
(a readable diff when not), nine fields in ten or more described, an example for every
ComputeDomain operation that fits its schema, tags named after the resources, and every
error documented with an example of its body."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from django.core.management import CommandError, call_command

from portal.api.openapi import description_coverage, drift, generate, render, schema_file

METHODS = {"get", "post", "put", "patch", "delete"}
DOMAINS = "/api/v1/namespaces/{namespace}/computedomains/"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return generate()


def operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def resolved(node: Any, schema: dict[str, Any]) -> Any:
    """A schema with its references inlined and OpenAPI's `nullable` as JSON Schema says it."""
    if isinstance(node, list):
        return [resolved(item, schema) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        _, section, kind, name = node["$ref"].split("/")
        return resolved(schema[section][kind][name], schema)
    out = {key: resolved(value, schema) for key, value in node.items() if key != "nullable"}
    return {"anyOf": [out, {"type": "null"}]} if node.get("nullable") else out


def examples_of(
    operation: dict[str, Any], schema: dict[str, Any]
) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(where, example value, its media type's schema) for the request and every answer."""
    bodies = [("request", operation.get("requestBody", {}))]
    bodies += [(code, resolved(r, schema)) for code, r in operation["responses"].items()]
    for where, body in bodies:
        for media in body.get("content", {}).values():
            for name, example in media.get("examples", {}).items():
                example = resolved(example, schema)
                yield f"{where} {name}", example["value"], media["schema"]


def test_the_committed_schema_is_what_the_code_generates(schema) -> None:
    committed = schema_file().read_text() if schema_file().exists() else ""
    generated = render(schema)
    if committed != generated:
        pytest.fail(
            "docs/openapi.yaml differs from the schema the code generates; "
            "regenerate it with `manage.py openapi`:\n" + drift(committed, generated),
            pytrace=False,
        )


def test_nine_in_ten_fields_or_more_are_described(schema) -> None:
    described, total = description_coverage(schema)
    print(f"fields described: {described} of {total} ({100 * described / total:.1f} %)")
    assert total > 400
    undescribed = [
        f"{name}.{field}"
        for name, component in schema["components"]["schemas"].items()
        for field, spec in component.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert described / total >= 0.9, f"{described}/{total}; undescribed: {undescribed}"


def test_every_computedomain_operation_has_examples_in_and_out(schema) -> None:
    domain_operations = [
        (path, method, operation)
        for path, method, operation in operations(schema)
        if path.startswith((DOMAINS, "/api/v1/approvals/"))
    ]
    assert len(domain_operations) == 12  # 8 under computedomains/, 4 under approvals/
    with_body = {(m, p) for p, m, op in domain_operations if "requestBody" in op}
    assert with_body == {
        ("post", DOMAINS),
        ("post", DOMAINS + "{name}/extend/"),
        ("post", DOMAINS + "{name}/replace/"),
        ("post", "/api/v1/approvals/{uid}/deny/"),
    }
    missing = []
    for path, method, operation in domain_operations:
        bodies = [(code, r) for code, r in operation["responses"].items() if code[0] == "2"]
        if "requestBody" in operation:
            bodies.append(("request", operation["requestBody"]))
        for where, body in bodies:
            if not body["content"]["application/json"].get("examples"):
                missing.append(f"{method} {path}: {where}")
    assert not missing, missing


def test_every_example_fits_its_schema(schema) -> None:
    checked, wrong = 0, []
    for path, method, operation in operations(schema):
        for where, value, media_schema in examples_of(operation, schema):
            checked += 1
            validator = jsonschema.Draft7Validator(resolved(media_schema, schema))
            wrong += [f"{method} {path} {where}: {e.message}" for e in validator.iter_errors(value)]
    assert checked >= 100  # the ComputeDomain examples and every operation's error examples
    assert not wrong, "\n".join(wrong)


def test_computedomains_and_members_are_tagged_as_themselves_not_namespaces(schema) -> None:
    for path, method, operation in operations(schema):
        if path.startswith(DOMAINS):
            assert operation["tags"] == ["computedomains"], (method, path)
        elif "/members/" in path:
            assert operation["tags"] == ["members"], (method, path)
        elif path.startswith("/api/v1/namespaces/"):
            assert operation["tags"] == ["namespaces"], (method, path)
    tags = {tag["name"]: tag.get("description", "") for tag in schema["tags"]}
    used = {tag for _, _, operation in operations(schema) for tag in operation["tags"]}
    assert used == set(tags) and all(tags.values()), tags
    assert next(iter(tags)) == "computedomains"


def test_every_operation_says_what_it_does_and_documents_its_errors(schema) -> None:
    for path, method, operation in operations(schema):
        assert operation.get("summary") or operation.get("description"), (method, path)
        codes = set(operation["responses"])
        expected = {"400", "401", "403", "404", "429", "503"}
        if method != "get":
            expected |= {"409", "413", "422"}
        assert expected <= codes, (method, path, expected - codes)
    shared = schema["components"]["responses"]
    assert shared["Error400"]["content"]["application/json"]["examples"]["invalid"]["value"][
        "field"
    ] == ("spec.numNodes")
    assert "Retry-After" in shared["Error503"]["headers"]
    assert "Retry-After" in shared["Error429"]["headers"]


def test_every_domain_operation_has_a_summary(schema) -> None:
    for path, method, operation in operations(schema):
        if path.startswith((DOMAINS, "/api/v1/approvals/", "/api/v1/namespaces/{namespace}/m")):
            assert operation.get("summary"), (method, path)


def test_the_command_shows_the_drift_and_rewrites_the_file(settings, tmp_path) -> None:
    settings.BASE_DIR = tmp_path
    (tmp_path / "docs").mkdir()
    stale = tmp_path / "docs" / "openapi.yaml"
    summary = "summary: Extend the domain's lease."
    current = render(generate())
    stale.write_text(current.replace(summary, "summary: Extend it."))
    with pytest.raises(CommandError) as refused:
        call_command("openapi", "--check", stdout=io.StringIO())
    diff = str(refused.value)
    assert "out of date; run `manage.py openapi`" in diff
    assert "+++ docs/openapi.yaml (generated)" in diff
    assert "-      summary: Extend it.\n" in diff and f"+      {summary}\n" in diff
    out = io.StringIO()
    call_command("openapi", stdout=out)
    assert "fields described:" in out.getvalue()
    assert stale.read_text() == current
    checked = io.StringIO()
    call_command("openapi", "--check", stdout=checked)
    assert "is up to date" in checked.getvalue()
