"""Pagination: `?limit=&offset=`, bounded so no request can ask the database for an
OFFSET beyond what it can count, or for a million rows at once."""

from __future__ import annotations

from typing import Any

from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**31 - 1


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000

    def get_offset(self, request: Any) -> int:
        return min(super().get_offset(request), MAX_OFFSET)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
