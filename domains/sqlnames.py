"""Quoted table and column names for the few statements written by hand (the agents' hot
path, the tallies): taken from the models, so a renamed field or table cannot drift from
the SQL."""

from __future__ import annotations

from django.db import connection, models


def table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def column(model: type[models.Model], name: str) -> str:
    """The quoted column of field `name` (a foreign key's `_id` column for a relation)."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column  # a column, not a reverse relation
    return connection.ops.quote_name(field.column)
