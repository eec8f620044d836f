# SPDX-License-Identifier: Apache-2.0
"""JSON Schemas (draft 2020-12) generated from the contract's typed messages.

A message is a `TypedDict`; a field says what it may hold with `Annotated[type, Wire(...)]`
(JSON Schema keywords: bounds, lengths, patterns, choices) and, where the portal reads a
left-out field as a value, `Wire(default=...)`. `json_schema(Message)` turns that into a
closed object schema: every field named, those without a default required. The typed view
(what mypy checks), the schema (what `jsonschema` checks) and the portal's request
validation are so the same definition.

Standard library only.
"""

from __future__ import annotations

import copy
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Keywords that say what a value is by themselves: with one of them, the Python type adds
# no "type" of its own.
_SELF_CONTAINED = frozenset({"enum", "const", "anyOf", "oneOf"})


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True, eq=False)  # hashed by identity: `Annotated` hashes its metadata
class Wire:
    """How a field travels: JSON Schema keywords for its value, the default the portal reads
    when it is left out, and, for a field that is one of several shapes, those shapes."""

    keywords: Mapping[str, Any] = field(default_factory=dict)
    default: Any = MISSING
    one_of: tuple[type, ...] = ()


def wire(default: Any = MISSING, *, one_of: tuple[type, ...] = (), **keywords: Any) -> Wire:
    """`Wire` with its keywords given as arguments: `wire(minimum=0, maximum=63)`."""
    if "any_of" in keywords:
        keywords["anyOf"] = keywords.pop("any_of")
    return Wire(keywords=keywords, default=default, one_of=one_of)


def hints(message: type) -> dict[str, Any]:
    """A message's fields and their annotations, `Annotated` kept."""
    return typing.get_type_hints(message, include_extras=True)


def field_wire(annotation: Any) -> Wire | None:
    """The outermost `Wire` of a field's annotation (under `NotRequired`), if any."""
    annotation = _unwrap_required(annotation)
    if get_origin(annotation) is typing.Annotated:
        for extra in reversed(annotation.__metadata__):
            if isinstance(extra, Wire):
                return extra
    return None


@functools.cache
def defaults(message: type) -> dict[str, Any]:
    """The fields the portal reads as a value when they are left out, with that value."""
    found = {}
    for name, annotation in hints(message).items():
        spec = field_wire(annotation)
        if spec is not None and spec.default is not MISSING:
            found[name] = spec.default
    return found


def with_defaults(message: type, document: Mapping[str, Any]) -> Any:
    """`document` with every left-out field that has a default set to it (lists and maps
    copied)."""
    filled = {k: copy.copy(v) if isinstance(v, list | dict) else v
              for k, v in defaults(message).items()}  # fmt: skip
    return filled | dict(document)


def json_schema(message: type, **extra: Any) -> dict[str, Any]:
    """The message's schema as a document of its own (`$schema`, `title`), with `extra`
    keywords (a rule across fields, such as "exactly one of two")."""
    return {"$schema": SCHEMA_DIALECT, "title": message.__name__, **object_schema(message), **extra}


def object_schema(message: type) -> dict[str, Any]:
    """A closed object: every field named, all required but those with a default or typed
    `NotRequired`."""
    properties: dict[str, Any] = {}
    required = []
    for name, annotation in hints(message).items():
        properties[name] = value_schema(annotation)
        spec = field_wire(annotation)
        # NotRequired read from the annotation itself: a TypedDict's __optional_keys__ misses
        # it under `from __future__ import annotations` before Python 3.12.
        optional = get_origin(annotation) is NotRequired
        if not optional and (spec is None or spec.default is MISSING):
            required.append(name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def value_schema(annotation: Any) -> dict[str, Any]:
    """The schema of one value of this annotation."""
    annotation = _unwrap_required(annotation)
    if get_origin(annotation) is typing.Annotated:
        base = _typed_schema(get_args(annotation)[0])
        for spec in annotation.__metadata__:
            if isinstance(spec, Wire):
                base = _merge(base, spec)
        return base
    return _typed_schema(annotation)


def _typed_schema(annotation: Any) -> dict[str, Any]:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return value_schema(annotation)
    if origin in (Union, types.UnionType):
        options = get_args(annotation)
        shapes = [value_schema(a) for a in options if a is not type(None)]
        nullable = [{"type": "null"}] if type(None) in options else []
        return {"anyOf": [*nullable, *shapes]}
    if origin is Literal:
        values = list(get_args(annotation))
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if origin is list:
        return {"type": "array", "items": value_schema(get_args(annotation)[0])}
    if origin is dict:
        key, value = get_args(annotation)
        keys = {k: v for k, v in value_schema(key).items() if k != "type"}
        found = {"type": "object", "additionalProperties": value_schema(value)}
        return found | ({"propertyNames": keys} if keys else {})
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is str:
        return {"type": "string"}
    if isinstance(annotation, type) and hasattr(annotation, "__required_keys__"):
        return object_schema(annotation)
    raise TypeError(f"no JSON Schema for {annotation!r}")


def _merge(base: dict[str, Any], spec: Wire) -> dict[str, Any]:
    if spec.one_of:
        return {"oneOf": [object_schema(shape) for shape in spec.one_of]}
    if _SELF_CONTAINED & spec.keywords.keys():
        return dict(spec.keywords)
    return base | dict(spec.keywords)


def _unwrap_required(annotation: Any) -> Any:
    while get_origin(annotation) in (NotRequired, Required):
        (annotation,) = get_args(annotation)
    return annotation
