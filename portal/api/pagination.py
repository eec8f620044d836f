"""Pagination: `?limit=&offset=`, bounded so no request can ask the database for an
OFFSET beyond what it can count, or for a million rows at once."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**31 - 1


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000

    def get_limit(self, request: Any) -> int:
        return self._bounded(request, self.limit_query_param, 1, self.max_limit, self.default_limit)

    def get_offset(self, request: Any) -> int:
        return self._bounded(request, self.offset_query_param, 0, MAX_OFFSET, 0)

    @staticmethod
    def _bounded(request: Any, name: str, low: int, high: int, default: int) -> int:
        """The parameter as a whole number within [low, high]; anything else (empty, given
        twice, a sign, a fraction) is a 400 naming it (DRF quietly used the default for
        `limit=-1` or `limit=` and clamped huge ones)."""
        values = request.query_params.getlist(name)
        if not values:
            return default
        raw = values[0]
        # The length first: int() of a 5,000-digit string is a ValueError, not a number.
        valid = len(values) == 1 and len(raw) <= 12 and raw.isascii() and raw.isdigit()
        if valid:
            valid = low <= int(raw) <= high
        if not valid:
            raise ValidationError({name: [f"must be a whole number from {low} to {high}, once"]})
        return int(raw)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        paginated = super().get_paginated_response_schema(schema)
        descriptions = {
            "count": "How many there are in all, over every page.",
            "next": "The next page's URL; null on the last page.",
            "previous": "The previous page's URL; null on the first page.",
            "results": "This page's items.",
        }
        # Examples fit for a one-item page (drf-spectacular pages each list example with them).
        examples: dict[str, Any] = {"count": 1, "next": None, "previous": None}
        for name, text in descriptions.items():
            field = paginated["properties"][name]
            if isinstance(field, dict):  # not the stand-in drf-spectacular pages examples with
                field["description"] = text
                if name in examples:
                    field["example"] = examples[name]
        return paginated
