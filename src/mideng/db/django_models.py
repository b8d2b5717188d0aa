"""A Django model as a SQLAlchemy ``Table``, so SQL built from Core constructs runs on its rows.

``model_table(model)`` describes the model's own table from ``model._meta`` (Django's public
model API): ``db_table``, the concrete fields of that table as columns (named by their
database column, keyed by their ``attname``: a ForeignKey ``customer`` is the column
``customer_id``), the primary key and the unique keys (``unique=True`` fields,
``unique_together``, unconditional ``UniqueConstraint``s). It is made once per model and
kept. Each column's ``info`` holds its Django field, which is how values cross: a call's
values go to the database as the field prepares them (``get_db_prep_value`` /
``get_db_prep_save``, with the connection: a datetime made naive in UTC on SQLite, a UUID
as text on MySQL), and rows come back through the converters Django applies to a query's
rows (``from_db_value``, the backend's own), as ``ModelRow``s.

The statements themselves are compiled by the SQLAlchemy dialect of the Django connection's
database (``django_connection.django_dialect``) and sent on Django's cursor by
``django_connection.DjangoSite``. Django is imported only for a caller who has a model.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from mideng.errors import ConfigurationError

#: Where a column keeps the Django field it was made from.
FIELD = "django_field"

# One Table per model class, made on first use. A model class lives as long as its project,
# so nothing here is dropped; the lock keeps two first calls from making two Tables.
_TABLES: dict[Any, Any] = {}
_MAKING = threading.RLock()  # a proxy's Table is made while making its own


class _Django(NamedTuple):
    """The names of Django's this module uses, imported once Django is: an import statement
    costs more than most of what a call does with them."""

    Model: type
    FieldDoesNotExist: type[Exception]
    ValidationError: type[Exception]


_LOADED: list[_Django] = []


def _django() -> _Django:
    if not _LOADED:
        from django.core.exceptions import FieldDoesNotExist, ValidationError
        from django.db.models import Model

        _LOADED.append(_Django(Model, FieldDoesNotExist, ValidationError))
    return _LOADED[0]


def is_model(obj: Any) -> bool:
    """Whether ``obj`` is a Django model class. Django is not imported for it: a program that
    has not imported its models has none."""
    if "django.db.models" not in sys.modules or not isinstance(obj, type):
        return False
    return issubclass(obj, _django().Model)


def model_table(model: Any) -> Any:
    """The SQLAlchemy ``Table`` of ``model``'s own database table, made once."""
    table = _TABLES.get(model)
    if table is None:
        with _MAKING:
            table = _TABLES.get(model)
            if table is None:
                table = _TABLES[model] = _described(model)
    return table


def _described(model: Any) -> Any:
    from sqlalchemy import Column, MetaData, Table, UniqueConstraint

    meta = model._meta
    if meta.abstract:
        raise ConfigurationError(f"{model.__name__} is an abstract model: it has no table")
    if meta.concrete_model is not model:  # a proxy: its rows are its concrete model's
        return model_table(meta.concrete_model)
    fields = list(meta.local_concrete_fields)
    key = {field.attname for field in _primary_key(meta)}
    cols = [
        Column(
            field.column,
            _column_type(field),
            key=field.attname,
            primary_key=field.attname in key,
            unique=bool(field.unique) and field.attname not in key,
            info={FIELD: field},
        )
        for field in fields
    ]
    uniques = [UniqueConstraint(*_attnames(meta, names)) for names in _unique_sets(meta)]
    return Table(meta.db_table, MetaData(), *cols, *uniques)


def _primary_key(meta: Any) -> list[Any]:
    """The primary key's fields: one, or a ``CompositePrimaryKey``'s (Django 5.2)."""
    return list(getattr(meta, "pk_fields", None) or [meta.pk])


def _unique_sets(meta: Any) -> list[tuple[str, ...]]:
    """The field names of each unique key declared beyond single ``unique=True`` fields:
    ``unique_together`` and the ``UniqueConstraint``s that hold for every row (no
    condition, no expressions), as Django itself lists them."""
    sets = [tuple(names) for names in meta.unique_together]
    sets += [tuple(constraint.fields) for constraint in meta.total_unique_constraints]
    return [names for names in sets if names]


def _column_type(field: Any) -> Any:
    """The SQLAlchemy type the statements are compiled with: what matters there is whether a
    column is a number (``c - :n``, ``version + 1``), a string or something else; values are
    bound as the Django field prepares them, never by this type."""
    from sqlalchemy import types

    target = field.target_field if field.is_relation else field
    internal = target.get_internal_type()
    if internal.endswith(("AutoField", "IntegerField")):
        return types.BigInteger() if "Big" in internal else types.Integer()
    by_internal_type = {
        "DecimalField": types.Numeric(),
        "FloatField": types.Float(),
        "BooleanField": types.Boolean(),
        "CharField": types.String(),
        "TextField": types.Text(),
        "SlugField": types.String(),
        "EmailField": types.String(),
        "DateTimeField": types.DateTime(),
        "DateField": types.Date(),
        "TimeField": types.Time(),
    }
    return by_internal_type.get(internal, types.NullType())


# -- names and values ----------------------------------------------------------------------
def _field(meta: Any, name: str, what: str) -> Any:
    """The concrete field of the model's own table that ``name`` (a field name, its
    ``attname`` or ``pk``) names."""
    if name == "pk":
        return meta.pk
    try:
        field = meta.get_field(name)
    except _django().FieldDoesNotExist:
        raise ConfigurationError(f"{meta.label} has no field {name!r} ({what})") from None
    if field not in meta.local_concrete_fields:
        raise ConfigurationError(
            f"{meta.label}.{name} is not a column of its table {meta.db_table} ({what}): "
            "name a concrete field of the model's own table"
        )
    return field


def _attnames(meta: Any, names: Iterable[str]) -> list[str]:
    return [_field(meta, name, "a unique key").attname for name in names]


def column_names(model: Any, names: Any, what: str) -> Any:
    """``names`` (a field name or a sequence of them) as the table's column keys."""
    meta = model._meta
    if isinstance(names, str):
        return _field(meta, names, what).attname
    return tuple(_field(meta, name, what).attname for name in names)


def _python_value(field: Any, value: Any, given: str) -> Any:
    """``value`` of ``field``: a model instance given for a relation by the field's name
    (``customer=ada``) stands for its key."""
    if field.is_relation and isinstance(value, _django().Model) and given != field.attname:
        return getattr(value, field.target_field.attname)
    return value


def _db_value(field: Any, value: Any, given: str, connection: Any, saving: bool) -> Any:
    """``value`` as the database takes it for ``field``."""
    django = _django()
    value = _python_value(field, value, given)
    try:
        if saving:
            return field.get_db_prep_save(value, connection)
        return field.get_db_prep_value(value, connection, prepared=False)
    except (TypeError, ValueError, django.ValidationError) as exc:
        raise ConfigurationError(
            f"{field.model._meta.label}.{field.name}: {value!r} is not a value of the field ({exc})"
        ) from exc


def column_values(
    model: Any, values: Mapping[str, Any], connection: Any, *, saving: bool, what: str
) -> dict[str, Any]:
    """``values`` by field name, as the table's columns (keys) and the database's values.
    ``saving``: values written (``get_db_prep_save``) rather than compared."""
    meta = model._meta
    found: dict[str, Any] = {}
    for name, value in values.items():
        field = _field(meta, name, what)
        if field.attname in found:
            raise ConfigurationError(f"{meta.label}.{field.attname} is given twice ({what})")
        found[field.attname] = (
            None if value is None else _db_value(field, value, name, connection, saving)
        )
    return found


def row_filter(where: Any) -> Mapping[str, Any]:
    """A filter as a mapping of field names: ``where`` itself, or a primary key value."""
    if isinstance(where, Mapping):
        return where
    return {"pk": where}


def insert_values(model: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """An insert's ``values`` as the row's Python values by column key (a related instance
    given for a ForeignKey as its key), with what Django itself fills in when a model instance
    is saved with the fields left out: each field's ``default`` and an ``auto_now`` /
    ``auto_now_add`` timestamp. A primary key with a ``default`` (``UUIDField(default=uuid4)``)
    gets it; an ``AutoField`` has none, and the database numbers the row."""
    meta = model._meta
    filled: dict[str, Any] = {}
    for name, value in values.items():
        field = _field(meta, name, "to insert")
        filled[field.attname] = _python_value(field, value, name)
    for field in meta.local_concrete_fields:
        if field.attname in filled:
            continue
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            from django.utils import timezone

            filled[field.attname] = timezone.now()
        elif field.has_default():
            filled[field.attname] = field.get_default()
    return filled


# -- rows ------------------------------------------------------------------------------------
class ModelRow(Sequence[Any]):
    """A row read back from Django's cursor: by position, as any row, and by column key
    through ``_mapping``, as a SQLAlchemy ``Row`` is."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: tuple[str, ...], values: tuple[Any, ...]) -> None:
        self.keys = keys
        self.values = values

    def __getitem__(self, index: Any) -> Any:
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)

    @property
    def _mapping(self) -> Mapping[str, Any]:
        return dict(zip(self.keys, self.values, strict=True))

    def __repr__(self) -> str:
        return f"ModelRow({self._mapping!r})"


def model_rows(
    columns: Sequence[Any], rows: Iterable[Sequence[Any]], connection: Any
) -> list[ModelRow]:
    """``rows`` of ``columns`` as Django would read them: each value through the converters
    of the column's field (none for a column of a plain Table), keyed by the columns' keys."""
    keys = tuple(column.key for column in columns)
    converters = [_converters(column, connection) for column in columns]
    return [
        ModelRow(
            keys,
            tuple(
                _converted(value, each, connection)
                for value, each in zip(row, converters, strict=True)
            ),
        )
        for row in rows
    ]


def _converters(column: Any, connection: Any) -> tuple[Any, list[Any]]:
    """The column's Django expression and the converters Django's query compiler applies to
    its values (the backend's, then the field's), or none for a column of a plain Table."""
    field = column.info.get(FIELD)
    if field is None:
        return None, []
    expression = field.get_col(field.model._meta.db_table)
    found = [
        *connection.ops.get_db_converters(expression),
        *expression.get_db_converters(connection),
    ]
    return expression, found


def _converted(value: Any, converters: tuple[Any, list[Any]], connection: Any) -> Any:
    expression, each = converters
    for converter in each:
        value = converter(value, expression, connection)
    return value
