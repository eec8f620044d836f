"""The agent API's input, from the contract's own definitions (agentwire/messages.py).

`serializer_for(Message)` builds a DRF serializer from a message's fields and their JSON
Schema keywords, so a field added to the contract is validated, documented (OpenAPI) and
defaulted here without a line of its own; its errors name the field as every other
endpoint's do. `canonical_check(Message)` recognises, without DRF, a document in the form
the agent always sends (every field, JSON types, text without surrounding blanks), in which
the serializer would accept it and change nothing: the agents' hot path (fastpath.py) skips
the serializer for those, and leaves anything else to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, NotRequired, get_args, get_origin

from rest_framework import serializers

from agentwire.messages import UUID_PATTERN
from agentwire.schema import MISSING, field_wire, hints, object_schema, value_schema
from portal.api.serializers.common import StrictSerializer

Check = Callable[[Any], bool]
_SERIALIZERS: dict[type, type[StrictSerializer]] = {}


# A serializer generated from a contract message (`serializer_for`); no docstring of its
# own, so the API's description of a message without one stays StrictSerializer's.
class ContractSerializer(StrictSerializer):
    def document(self) -> Any:
        """The validated document in its wire form (UUIDs as text), defaults filled in."""
        return json.loads(json.dumps(self.validated_data, default=str))


def serializer_for(message: type, *, name: str = "") -> type[ContractSerializer]:
    """The DRF serializer of a contract message, built once (`name`: its class name, and so
    its OpenAPI component's, by default the message's). A field that is a message, or a list
    of messages, gets that message's serializer."""
    if message not in _SERIALIZERS:
        fields: dict[str, Any] = {f: _field(a) for f, a in hints(message).items()}
        if message.__doc__ and "(*args, **kwargs)" not in message.__doc__:
            fields["__doc__"] = message.__doc__
        _SERIALIZERS[message] = type(
            (name or message.__name__) + "Serializer", (ContractSerializer,), fields
        )
    return _SERIALIZERS[message]  # type: ignore[return-value]


def _field(annotation: Any) -> serializers.Field:
    spec = field_wire(annotation)
    default = MISSING if spec is None else spec.default
    optional: dict[str, Any] = {}
    if default is not MISSING:
        optional = {"required": False, "default": list if default == [] else default}
    elif _may_be_left_out(annotation):  # and then stays out
        optional = {"required": False}
    described = value_schema(annotation).get("description")
    if described:
        optional["help_text"] = described
    base = _bare(annotation)
    if _is_message(base):
        return serializer_for(base)(**optional)
    if get_origin(base) is list and _is_message(get_args(base)[0]):
        schema = value_schema(annotation)
        bounds = {
            key: schema[word]
            for key, word in (("max_length", "maxItems"), ("min_length", "minItems"))
            if word in schema
        }
        return serializer_for(get_args(base)[0])(many=True, **bounds, **optional)
    return _from_schema(value_schema(annotation), optional)


def _may_be_left_out(annotation: Any) -> bool:
    """A `NotRequired` field without a default: left out, it is not there."""
    spec = field_wire(annotation)
    return get_origin(annotation) is NotRequired and (spec is None or spec.default is MISSING)


def _bare(annotation: Any) -> Any:
    """The annotation without NotRequired and Annotated."""
    while get_origin(annotation) in (NotRequired, Annotated):
        annotation = get_args(annotation)[0]
    return annotation


def _is_message(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "__required_keys__")


def _from_schema(schema: Mapping[str, Any], optional: dict[str, Any]) -> serializers.Field:
    options = schema.get("anyOf")
    if options and options[0] == {"type": "null"} and len(options) == 2:
        return _from_schema(options[1] | {"nullable": True}, optional)
    if options and options[0] == {"const": ""}:
        return _text_or_blank(options[1:], optional)
    if "enum" in schema:
        return serializers.ChoiceField(list(schema["enum"]), **optional)
    if schema.get("type") == "array":
        return _array(schema, optional)
    return _scalar(schema, optional)


def _text_or_blank(shapes: list[Any], optional: dict[str, Any]) -> serializers.Field:
    """A text that may be empty: an IP address, or one matching a pattern."""
    if shapes and all(shape.get("format") in ("ipv4", "ipv6") for shape in shapes):
        return serializers.IPAddressField(allow_blank=True, **optional)
    if len(shapes) == 1 and "pattern" in shapes[0]:
        return serializers.RegexField(shapes[0]["pattern"], allow_blank=True, **optional)
    raise TypeError(f"no serializer field for {shapes!r}")


def _array(schema: Mapping[str, Any], optional: dict[str, Any]) -> serializers.Field:
    bounds = {
        key: schema[word]
        for key, word in (("max_length", "maxItems"), ("min_length", "minItems"))
        if word in schema
    }
    return serializers.ListField(child=_from_schema(schema["items"], {}), **bounds, **optional)


def _scalar(schema: Mapping[str, Any], optional: dict[str, Any]) -> serializers.Field:
    nullable: dict[str, Any] = {"allow_null": True} if schema.get("nullable") else {}
    kind = schema.get("type")
    if kind == "integer":
        return serializers.IntegerField(
            min_value=schema.get("minimum"), max_value=schema.get("maximum"), **nullable, **optional
        )
    if kind == "boolean":
        return serializers.BooleanField(**optional)
    if kind == "string" and schema.get("pattern") == UUID_PATTERN:
        return serializers.UUIDField(**nullable, **optional)
    if kind == "string" and "pattern" in schema:
        return serializers.RegexField(
            schema["pattern"], max_length=schema.get("maxLength"), **nullable, **optional
        )
    if kind == "string":
        return serializers.CharField(
            max_length=schema.get("maxLength"),
            min_length=schema.get("minLength"),
            allow_blank=not schema.get("minLength"),
            **nullable,
            **optional,
        )
    raise TypeError(f"no serializer field for {schema!r}")


# --- the agent's own form, recognised without DRF ------------------------------------------------
_LOWER_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NOT_IN_TEXT = re.compile(r"[\x00\ud800-\udfff]")  # refused by DRF's CharField


def canonical_check(message: type) -> Check:
    """A test that a document is the message in the agent's own form (see the module's
    docstring): what it passes, `serializer_for(message)` accepts and reads unchanged. A
    `NotRequired` field without a default may be left out: the serializer leaves it out
    too."""
    optional = frozenset(name for name, a in hints(message).items() if _may_be_left_out(a))
    return _object_check(object_schema(message), optional)


def _check(schema: Mapping[str, Any]) -> Check:
    options = schema.get("anyOf")
    if options and options[0] == {"type": "null"} and len(options) == 2:
        inner = _check(options[1])
        return lambda v: v is None or inner(v)
    if "enum" in schema:
        choices = frozenset(schema["enum"])
        return lambda v: type(v) is str and v in choices
    kind = schema.get("type")
    if kind == "object":
        return _object_check(schema)
    if kind == "array":
        item, most = _check(schema["items"]), schema.get("maxItems", float("inf"))
        least = schema.get("minItems", 0)
        return lambda v: type(v) is list and least <= len(v) <= most and all(map(item, v))
    if kind == "integer":
        low, high = schema.get("minimum", -float("inf")), schema.get("maximum", float("inf"))
        return lambda v: type(v) is int and low <= v <= high
    if kind == "boolean":
        return lambda v: type(v) is bool
    if kind == "string" and schema.get("pattern") == UUID_PATTERN:
        return lambda v: type(v) is str and _LOWER_UUID.fullmatch(v) is not None
    if kind == "string" and "pattern" not in schema:
        most, least = schema.get("maxLength", float("inf")), schema.get("minLength", 0)
        return lambda v: (
            type(v) is str
            and least <= len(v) <= most
            and v == v.strip()
            and not _NOT_IN_TEXT.search(v)
        )
    return lambda v: False  # left to the serializer


def _object_check(schema: Mapping[str, Any], optional: frozenset[str] = frozenset()) -> Check:
    checks = {name: _check(value) for name, value in schema["properties"].items()}
    keys = checks.keys()
    always = keys - optional

    def check(value: Any) -> bool:
        return (
            type(value) is dict
            and always <= value.keys() <= keys
            and all(test(value[name]) for name, test in checks.items() if name in value)
        )

    return check
