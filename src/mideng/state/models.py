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

from mideng.db.django_connection import django_connection, django_kind, is_django_connection
from mideng.db.django_models import (
    column_names,
    column_values,
    insert_values,
    model_table,
    row_filter,
)
from mideng.errors import ConfigurationError
from mideng.state.results import Existing, Inserted


class OnTable(NamedTuple):
    """An update's arguments in its table's terms, and the Django connection to run on."""

    connection: Any
    table: Any
    where: Mapping[str, Any]
    values: Mapping[str, Any] | None


class InsertOnTable(NamedTuple):
    """An insert's arguments in its table's terms: the values as the database takes them,
    and as Python has them (``written``)."""

    connection: Any
    table: Any
    values: Mapping[str, Any]
    unique: Any
    written: Mapping[str, Any]


def _connection(conn: Any, model: Any) -> Any:
    if not is_django_connection(conn):
        raise ConfigurationError(
            f"{model.__name__} is a Django model: pass a Django connection or its alias "
            f'("default") with it, not {type(conn)!r}; a SQLAlchemy connection takes a Table'
        )
    return django_connection(conn)


def on_table(conn: Any, model: Any, where: Any, values: Mapping[str, Any] | None) -> OnTable:
    """``where`` and ``values`` of an update of ``model`` as its table's columns and the
    database's values."""
    connection = _connection(conn, model)
    table = model_table(model)  # first: it refuses a model with no table of its own
    found_where = column_values(
        model, row_filter(where), connection, saving=False, what="pick the row by"
    )
    found_values = values
    if values is not None:
        found_values = column_values(model, values, connection, saving=True, what="to set")
    return OnTable(connection, table, found_where, found_values)


def on_insert(conn: Any, model: Any, values: Mapping[str, Any], unique: Any) -> InsertOnTable:
    """insert_once's ``values`` (filled in as ``Model.objects.create`` fills a row) and
    ``unique`` key as its table's columns."""
    connection = _connection(conn, model)
    table = model_table(model)
    written = insert_values(model, values)
    sent = column_values(model, written, connection, saving=True, what="to insert")
    key = column_names(model, unique, "the unique key")
    return InsertOnTable(connection, table, sent, key, written)


def as_written(answer: Inserted | Existing, insert: InsertOnTable) -> Inserted | Existing:
    """insert_once's answer with the row's Python values. Only an insert with no RETURNING
    (MySQL 8) answers with the values it sent, which are the database's (a UUID as text, a
    datetime as a string on MySQL) and the id the server made: those values are put back as
    Python had them. Every other row was read back through the fields' converters."""
    if isinstance(answer, Inserted) and django_kind(insert.connection) == "mysql":
        return Inserted({**answer.row, **insert.written})
    return answer


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
