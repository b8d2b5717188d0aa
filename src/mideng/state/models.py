"""A Django model in place of a ``Table``: a primitive's arguments as its table's.

The model becomes its SQLAlchemy ``Table`` (mideng.db.django_models, made once per model),
the row filter (a primary key value, or a mapping of field names: a ForeignKey by its name
``customer`` or its column ``customer_id``) and the values become the table's column keys
and the values Django's fields make of them for the connection, so the primitives build,
compile and keep the same statements as for any Table, and run them on Django's cursor
(mideng.state.run). An insert is filled in as Django's ``Model.objects.create`` fills a new
row (field defaults, ``auto_now`` / ``auto_now_add``); an update sets only what it is given,
as ``QuerySet.update`` does.

A model goes with a Django connection or its alias; the async twins take none: Django's
connections are per thread and blocking, so async code calls the sync primitive through
``asgiref.sync.sync_to_async`` (thread-sensitive, Django's default), as it does the ORM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from mideng.db.django_connection import django_connection, is_django_connection
from mideng.db.django_models import (
    column_names,
    column_values,
    insert_values,
    model_table,
    row_filter,
)
from mideng.errors import ConfigurationError


class OnTable(NamedTuple):
    """A primitive's arguments in its table's terms, and the Django connection to run on."""

    connection: Any
    table: Any
    where: Mapping[str, Any]
    values: Mapping[str, Any] | None


def _connection(conn: Any, model: Any) -> Any:
    if not is_django_connection(conn):
        raise ConfigurationError(
            f"{model.__name__} is a Django model: pass a Django connection or its alias "
            f'("default") with it, not {type(conn)!r}; a SQLAlchemy connection takes a Table'
        )
    return django_connection(conn)


def on_table(
    conn: Any, model: Any, where: Any, values: Mapping[str, Any] | None, *, inserting: bool
) -> OnTable:
    """``where`` and ``values`` of a call on ``model`` as its table's columns and the
    database's values (``where`` None for an insert)."""
    connection = _connection(conn, model)
    table = model_table(model)  # first: it refuses a model with no table of its own
    found_where: Mapping[str, Any] = {}
    if where is not None:
        found_where = column_values(
            model, row_filter(where), connection, saving=False, what="pick the row by"
        )
    found_values = values
    if values is not None:
        given = insert_values(model, values) if inserting else values
        found_values = column_values(
            model, given, connection, saving=True, what="to insert" if inserting else "to set"
        )
    return OnTable(connection, table, found_where, found_values)


def unique_key(model: Any, unique: Any) -> Any:
    """insert_once's ``unique`` (a field name or several) as the table's column keys."""
    return column_names(model, unique, "the unique key")


def on_column(model: Any, name: str, what: str) -> str:
    """A column a primitive itself sets or reads, named by its field, as the table's key."""
    found: str = column_names(model, name, what)
    return found


def refused_async(model: Any) -> ConfigurationError:
    """What an async twin says when handed a Django model."""
    return ConfigurationError(
        f"{model.__name__} is a Django model, and Django's connections are per thread and "
        "blocking: call the sync function through asgiref.sync.sync_to_async (as for the ORM)"
    )
