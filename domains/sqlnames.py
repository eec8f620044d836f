"""Quoted table and column names for the few statements written by hand (the agents' hot
path, the tallies): taken from the models, so a renamed field or table cannot drift from
the SQL.

A statement names them through its models: `statement("SELECT {node.hostname} FROM {node}",
node=Node)` quotes the table and the field's column, so no statement keeps its own map of
placeholders to columns.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, models


def table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def column(model: type[models.Model], name: str) -> str:
    """The quoted column of field `name` (a foreign key's `_id` column for a relation)."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column  # a column, not a reverse relation
    return connection.ops.quote_name(field.column)


class Names:
    """A model as a statement names it: `{x}` its table, `{x.field}` that field's column."""

    def __init__(self, model: type[models.Model]) -> None:
        self._model = model

    def __format__(self, spec: str) -> str:
        return table(self._model)

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        return column(self._model, name)


def statement(template: str, /, **values: Any) -> str:
    """`template` with each model given as `Names` and any other value as it is (`%s`
    placeholders for the values a statement is run with stay as they are)."""
    named = {
        key: Names(value) if isinstance(value, type) and issubclass(value, models.Model) else value
        for key, value in values.items()
    }
    return template.format(**named)
