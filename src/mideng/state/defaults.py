"""A table's Python-side column defaults (INSERT) and ``onupdate`` values (UPDATE), applied as
SQLAlchemy Core's ``table.insert()`` / ``table.update()`` would apply them.

A primitive's statement is compiled once and sent as text, so SQLAlchemy's per-execution step
that computes these values never runs for it. Instead each such column is written into the
statement once, when its shape is built, for every column the call does not set itself (a
value given explicitly wins, as in Core):

- a SQL expression (``default=func.now()``, ``onupdate=func.now()``) and, where the dialect
  uses sequences, a ``Sequence``: rendered into the statement, evaluated by the database (an
  expression's own bound values as literals);
- a Python scalar or callable: a typed bind of its own, whose value is computed once per call
  (``fill``) — the callable with a context that has what a Core default reads from
  SQLAlchemy's execution context: ``current_parameters`` / ``get_current_parameters()`` (the
  values the statement sets, by column key, the defaults computed before this one
  included), ``current_column`` and ``dialect``. A zero-argument callable (``uuid4``,
  ``datetime.now``) is called without it, as SQLAlchemy does;
- ``server_default`` / ``server_onupdate``: left to the database, not in the statement.

A table with none of these gets exactly the statement it got before, and an empty ``filled``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple


class Filled(NamedTuple):
    """A column whose Python-side default (or onupdate) is bound per call as ``bind``."""

    bind: str
    column: Any
    default: Any  # the Column's ColumnDefault: its ``arg`` is the scalar or the callable


class Applying(NamedTuple):
    """What a shape's statement gains for the columns it does not set itself."""

    values: dict[Any, Any]  # column -> bind, SQL expression or next sequence value
    binds: list[Any]
    filled: tuple[Filled, ...]


def _applying(cols: Iterable[tuple[Any, Any]], prefix: str, dialect: Any) -> Applying:
    from sqlalchemy import bindparam

    values: dict[Any, Any] = {}
    binds: list[Any] = []
    filled: list[Filled] = []
    for col, default in cols:
        if default.is_sequence:
            if not dialect.supports_sequences or (default.optional and dialect.sequences_optional):
                continue  # as Core: the dialect generates the value its own way, or none
            values[col] = default.next_value()
        elif default.is_clause_element:
            values[col] = _inline(default.arg, col, dialect)
        elif default.is_scalar or default.is_callable:
            bind = bindparam(f"{prefix}{len(filled)}", type_=col.type)
            values[col] = bind
            binds.append(bind)
            filled.append(Filled(bind.key, col, default))
    return Applying(values, binds, tuple(filled))


def _inline(expression: Any, col: Any, dialect: Any) -> Any:
    """A SQL-expression default as it goes into the kept text. Its own bound values
    (``coalesce(x, 0)``, ``x + 1``) are written as literals: the statement is sent with the
    call's binds only, which would leave theirs without a value."""
    from sqlalchemy import literal_column
    from sqlalchemy.sql import visitors
    from sqlalchemy.sql.elements import BindParameter

    if not any(isinstance(e, BindParameter) for e in visitors.iterate(expression)):
        return expression
    sql = expression.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
    return literal_column(f"({sql})", type_=col.type)


def insert_defaults(table: Any, given: Iterable[str], dialect: Any) -> Applying:
    """The defaults of the columns an INSERT of ``given`` leaves out."""
    named = set(given)
    return _applying(
        ((c, c.default) for c in table.columns if c.key not in named and c.default is not None),
        "d",
        dialect,
    )


def update_defaults(table: Any, assigned: Iterable[Any], dialect: Any) -> Applying:
    """The onupdate values of the columns an UPDATE setting ``assigned`` leaves out."""
    taken = {c.key for c in assigned}
    return _applying(
        ((c, c.onupdate) for c in table.columns if c.key not in taken and c.onupdate is not None),
        "u",
        dialect,
    )


class DefaultContext:
    """The part of SQLAlchemy's execution context a context-sensitive default reads."""

    __slots__ = ("current_column", "current_parameters", "dialect")

    def __init__(self, current: dict[str, Any], dialect: Any) -> None:
        self.current_parameters = current
        self.current_column: Any = None
        self.dialect = dialect

    def get_current_parameters(self, isolate_multiinsert_groups: bool = True) -> dict[str, Any]:
        return self.current_parameters


def fill(
    filled: tuple[Filled, ...], params: dict[str, Any], given: Mapping[str, Any], dialect: Any
) -> dict[str, Any]:
    """Compute the call's Python-side defaults into ``params`` (by bind); answers the values
    the statement sets by column key, ``given`` and the defaults computed."""
    current = dict(given)
    context = DefaultContext(current, dialect)
    for bind, column, default in filled:
        if default.is_callable:
            context.current_column = column
            value = default.arg(context)
        else:
            value = default.arg
        params[bind] = value
        current[column.key] = value  # a later default sees this one, as in Core
    return current
