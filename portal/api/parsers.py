"""The API's JSON parser: DRF's, with limits on size and nesting.

Python's json module recurses once per `[` or `{`: a body of 100,000 `[` (100 kB) ran it out
of stack and answered 500 (RecursionError), anonymously, on every JSON endpoint. No API
input nests deeper than a few levels (a domain spec, a report's peers), so bodies nested
deeper than MAX_DEPTH are refused with 400 before they are parsed, and bodies over
MAX_BODY with 413, both in the API's error shape.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

# Deeper than any document the API takes (a ComputeDomain spec is 4 levels).
MAX_DEPTH = 32
# A status report listing every channel is ~10 kB; the agent's fast path uses the same bound.
MAX_BODY = 1 << 20

# Strings (whose brackets do not count) and brackets; everything else is skipped by the
# regex engine in C, so a scan of a 1 MiB body costs a few milliseconds.
_TOKENS = re.compile(rb'"(?:[^"\\]+|\\.)*"|[\[\]{}]', re.DOTALL)


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = f"The request body is larger than {MAX_BODY} bytes."
    default_code = "too_large"


def too_deep(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text nests arrays/objects deeper than `limit` (stops early)."""
    depth = 0
    for match in _TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def loads_bounded(body: bytes) -> Any:
    """json.loads for untrusted bodies: ValueError for anything too big, deep or malformed."""
    if len(body) > MAX_BODY:
        raise ValueError(f"body over {MAX_BODY} bytes")
    if too_deep(body):
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(body.decode("utf-8"))
    except RecursionError as exc:  # cannot happen below MAX_DEPTH; never a 500 if it does
        raise ValueError("JSON nested too deeply") from exc


class BoundedJSONParser(JSONParser):
    """JSONParser that refuses bodies over MAX_BODY (413) or nested over MAX_DEPTH (400)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        body = stream.read(MAX_BODY + 1) if stream is not None else b""
        if len(body) > MAX_BODY:
            raise PayloadTooLarge()
        if too_deep(body):
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.")
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        try:
            text = body.decode(encoding)
            return json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        except RecursionError as exc:
            raise exceptions.ParseError("JSON nested too deeply.") from exc
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
