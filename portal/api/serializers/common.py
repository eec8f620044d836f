"""Building blocks shared by the API's serializers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

# Go/Kubernetes-style durations ("24h", "1h30m", "90s"), the form kubectl users write.
# The schema's pattern keeps each number short enough to stay under MAX_DURATION.
DURATION_PATTERN = (
    r"^([0-9]{1,4}h([0-9]{1,4}m)?([0-9]{1,4}s)?|[0-9]{1,4}m([0-9]{1,4}s)?|[0-9]{1,6}s)$"
)
_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
MAX_DURATION = timedelta(days=3650)


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not know, naming each one (nested serializers too), and takes
    numbers only as JSON numbers and text only as JSON strings: `"numNodes": "3"` is
    refused, not read as 3, and so is `"name": 5`."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key: [f"unknown field {key!r}"] for key in unknown}
                )
            not_numbers = sorted(
                name
                for name, field in self.fields.items()
                if isinstance(field, _NUMBERS)
                and name in data
                and (isinstance(data[name], str | bool))
            )
            if not_numbers:
                raise serializers.ValidationError(
                    {name: ["must be a number, not a string"] for name in not_numbers}
                )
            not_strings = sorted(
                name
                for name, field in self.fields.items()
                if isinstance(field, serializers.CharField)
                and data.get(name) is not None
                and not isinstance(data.get(name), str)
            )
            if not_strings:
                raise serializers.ValidationError(
                    {name: ["must be a string"] for name in not_strings}
                )
        return super().to_internal_value(data)


_NUMBERS = (serializers.IntegerField, serializers.FloatField, serializers.DecimalField)


class StrictCharField(serializers.CharField):
    """A JSON string, not a number or boolean quietly turned into one."""

    default_error_messages = {"not_a_string": "must be a string"}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON true/false, not "yes", 1 or "on"."""

    default_error_messages = {"not_a_boolean": "must be true or false"}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("not_a_boolean")
        return data


def format_duration(value: timedelta) -> str:
    total = int(value.total_seconds())
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    text += f"{seconds}s" if seconds or not text else ""
    return text


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text or "")
    if not text or not match:
        raise ValueError("must be a duration like 24h, 1h30m or 90s")
    parts = {k: int(v) for k, v in match.groupdict(default="0").items()}
    if max(parts.values()) > 10_000_000:
        raise ValueError(f"must be at most {MAX_DURATION.days} days")
    value = timedelta(hours=parts["h"], minutes=parts["m"], seconds=parts["s"])
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s")
    if value > MAX_DURATION:
        raise ValueError(f"must be at most {MAX_DURATION.days} days")
    return value


@extend_schema_field(
    {"type": "string", "pattern": DURATION_PATTERN, "example": "24h", "maxLength": 32}
)
class DurationField(serializers.Field):
    """A timedelta as a Go duration string: "24h", "1h30m", "90s"."""

    default_error_messages = {"invalid": "{reason}"}

    def to_representation(self, value: timedelta) -> str:
        return format_duration(value)

    def to_internal_value(self, data: Any) -> timedelta:
        if not isinstance(data, str) or len(data) > 32:
            self.fail("invalid", reason="must be a duration string like 24h, 1h30m or 90s")
        try:
            return parse_duration(data)
        except ValueError as exc:
            self.fail("invalid", reason=str(exc))


LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class LabelsField(serializers.DictField):
    """Kubernetes labels: qualified-name keys, short values."""

    child = StrictCharField(allow_blank=True, max_length=63)

    def to_internal_value(self, data: Any) -> dict[str, str]:
        value = super().to_internal_value(data)
        if len(value) > 64:
            raise serializers.ValidationError("at most 64 labels")
        for key, item in value.items():
            if len(key) > 317 or not LABEL_KEY.match(key):
                raise serializers.ValidationError(f"label key {key!r} is not a valid label name")
            if not LABEL_VALUE.match(item):
                raise serializers.ValidationError(
                    f"label {key!r}: value must be at most 63 letters, digits, '-', '_' or '.'"
                    ", starting and ending with a letter or digit"
                )
        return value


class ReasonSerializer(StrictSerializer):
    """Body of actions that take an optional human reason (cordon, drain, deny, release)."""

    reason = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=300,
        default="",
        help_text="Why, in words; kept in the audit log.",
    )


class AcceptSerializer(ReasonSerializer):
    """Where a tray that joined unknown goes: a rack and one of its compute slots. A tray
    that reported a new identity keeps its own unless they are given."""

    rack = StrictCharField(
        max_length=63,
        required=False,
        default="",
        help_text="The rack's name (a tray that joined unknown: needed).",
    )
    slot = serializers.IntegerField(
        min_value=1,
        max_value=64,
        required=False,
        default=None,
        help_text="A compute slot of the rack, from 1 (a tray that joined unknown: needed).",
    )
