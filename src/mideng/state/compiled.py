"""How a business-table statement is compiled and sent: once per statement and dialect, so that
a call only binds its parameters.

A statement is kept as a ``TableSql`` and sent one of two ways:

- as the dialect's own SQL (``driver``), through ``Connection.exec_driver_sql``: compiled once,
  by the connection's dialect, in its bind style and with its casts, exactly as SQLAlchemy
  compiles the Core construct; the call's parameters go to the driver as they are. The
  execution is still SQLAlchemy's (its events, its error wrapping, invalidation of a lost
  connection, the caller's transaction); what it skips is the per-call lookup in the compiled
  cache (a cache-key walk of the text and its binds) and the parameters' processing, which are
  most of the Python an UPDATE costs. Only for a statement that returns no rows, whose binds'
  types process nothing on that dialect, and whose execution needs no per-call step
  SQLAlchemy would take (Python-side column defaults, binds rendered at execution, bind types
  handed to the driver per execution);
- otherwise through ``Connection.execute`` as a ``text()`` typed with the table's columns
  (``clause``): SQLAlchemy processes the binds by type and types the rows returned, so an
  ``Inserted`` or a read-back row holds what the columns' types make of it.
"""

from __future__ import annotations

import copy
import itertools
import operator
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from mideng.db.dialect import kind_of
from mideng.db.statements import Res, Sql


class Speech(NamedTuple):
    """What SQL one connected dialect takes: its statement kind, and the number its compiled
    statements are kept under (dialects that compile alike share it)."""

    kind: str
    key: int


# Per dialect object, so a call finds its speech with one lookup and no checks; weak, so it
# goes with the engine. The numbers are per set of properties that change compiled SQL, so
# engines made again and again for the same database share their statements.
_SPOKEN: weakref.WeakKeyDictionary[Any, Speech] = weakref.WeakKeyDictionary()
_ALIKE: dict[tuple[Any, ...], int] = {}
_NUMBERS = itertools.count()


def _nothing() -> None:
    return None


#: The dialect last asked about and its speech, as one tuple (replaced whole, so a thread never
#: reads one dialect's reference with another's speech): an application talks to one database
#: in the common case, and a weak reference called is cheaper than a weak dictionary's lookup.
_LAST: list[tuple[Callable[[], Any], Speech]] = [(_nothing, Speech("", -1))]


def speech(dialect: Any) -> Speech:
    last = _LAST[0]
    if last[0]() is dialect:
        return last[1]
    found = _SPOKEN.get(dialect)
    if found is None:
        alike = (
            type(dialect),
            dialect.paramstyle,
            dialect.server_version_info,
            getattr(dialect, "is_mariadb", False),
            dialect.identifier_preparer.initial_quote,  # MySQL's ANSI_QUOTES mode
        )
        # setdefault and next() each run whole under the GIL: two threads seeing a new dialect
        # at once get one number.
        found = Speech(kind_of(dialect), _ALIKE.setdefault(alike, next(_NUMBERS)))
        _SPOKEN[dialect] = found
    _LAST[0] = (weakref.ref(dialect), found)
    return found


class TableSql(Sql):
    """A statement compiled from a Core construct: its ``:name`` text and typed clause, and,
    where it qualifies (see the module's text), the dialect's own text to send instead.
    ``stamp``: the statement's answer carries MySQL's last insert id. ``returned``: the
    columns of the rows it returns, which a cursor with no SQLAlchemy result (Django's)
    keys and converts rows by."""

    __slots__ = ("arguments", "driver", "returned", "stamp", "typed")

    def __init__(
        self,
        construct: Any,
        dialect: Any,
        binds: Sequence[Any],
        columns: Any = (),
        *,
        stamp: bool = False,
    ) -> None:
        from sqlalchemy import text

        super().__init__(construct.compile(dialect=_named(dialect)).string)
        clause: Any = text(self.text).bindparams(*binds)
        self.typed: Any = clause.columns(*columns) if columns else clause
        self.returned: tuple[Any, ...] = tuple(columns)
        self.stamp = stamp
        self.driver: str | None = None
        self.arguments: Callable[[Mapping[str, Any]], Any] = _as_given
        if not self.rows:
            form = _driver_form(construct, dialect)
            if form is not None:
                self.driver, self.arguments = form

    @property
    def clause(self) -> Any:
        return self.typed

    def answer(self, result: Any) -> Res:
        """The ``Res`` of a SQLAlchemy result of this statement."""
        if self.rows:
            # Counted as fetched: no primitive reads a row-returning statement's rowcount,
            # which DB-API drivers define for DML only, and asking costs two property calls.
            rows = result.fetchall()
            return Res(len(rows), rows, 0)
        count = result.rowcount
        # psycopg has no lastrowid; only MySQL's means something (the id an INSERT made).
        return Res(count, (), (result.lastrowid or 0) if self.stamp else 0)


def _as_given(params: Mapping[str, Any]) -> Mapping[str, Any]:
    return params


def _driver_form(
    construct: Any, dialect: Any
) -> tuple[str, Callable[[Mapping[str, Any]], Any]] | None:
    """The dialect's own text of ``construct`` and how a call's ``:name`` parameters become
    the driver's, or None when SQLAlchemy has work to do on every execution."""
    from sqlalchemy.engine.interfaces import BindTyping

    if dialect.bind_typing is BindTyping.SETINPUTSIZES:
        return None  # the driver is told each bind's type per execution (asyncpg)
    compiled = construct.compile(dialect=dialect)
    if (
        compiled.insert_prefetch  # Python-side defaults, computed per execution
        or compiled.update_prefetch
        or compiled.post_compile_params  # rendered into the text per execution
        or compiled.literal_execute_params
        or compiled.escaped_bind_names  # renamed for the driver
    ):
        return None
    for bind in compiled.binds.values():
        if bind.type.dialect_impl(dialect).bind_processor(dialect) is not None:
            return None  # an Enum, a Numeric on SQLite, JSON …: SQLAlchemy converts values
    if not compiled.positional:
        return compiled.string, _as_given
    order = tuple(compiled.positiontup or ())
    if len(order) == 1:
        (only,) = order
        return compiled.string, lambda params: (params[only],)
    return compiled.string, operator.itemgetter(*order)


_NAMED: dict[tuple[Any, ...], Any] = {}


def _named(dialect: Any) -> Any:
    """The connection's dialect (its server version, its RETURNING support) writing ``:name``
    binds with no inline casts, so the text is one mideng.db and SQLAlchemy's text() read.
    One per dialect class and server version, however many engines there are."""
    key = (type(dialect), dialect.server_version_info, getattr(dialect, "is_mariadb", False))
    found = _NAMED.get(key)
    if found is None:
        from sqlalchemy.engine.interfaces import BindTyping

        found = copy.copy(dialect)
        found.paramstyle = "named"
        found.positional = False
        found.bind_typing = BindTyping.NONE
        found.__dict__["_bind_typing_render_casts"] = False  # memoized from the original
        _NAMED[key] = found
    return found
